"""Credentials read by tests, kept out of pytest's failure reports."""

from __future__ import annotations

from typing import Any

# The keys whose values Tacker's API hides in a vimConnectionInfo entry.
CREDENTIAL_KEYS = frozenset({"bearer_token", "password", "client_secret"})


class Secret(str):
    """A string whose ``repr`` hides it. pytest prints the arguments of every frame of a
    failure's traceback, and an assertion message the reprs of what it compares: a token
    in a request body travels through several such frames (the request's dict, Tacker's
    client). ``json.dumps``, ``str()`` and formatting still give the value."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'<secret>'"


def masked(value: Any) -> Any:
    """``value`` (JSON data) with every string under a :data:`CREDENTIAL_KEYS` key a
    :class:`Secret`, at any depth; equal to ``value`` in every other way."""
    if isinstance(value, dict):
        return {
            k: Secret(v) if k in CREDENTIAL_KEYS and isinstance(v, str) else masked(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value
