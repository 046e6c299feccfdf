"""Identifiers that arrive from outside: what a vnfInstanceId, vnfLcmOpOccId, subscription
or notification id may look like before anything stores it or puts it in a URL.

Tacker's ids are UUIDs (36 characters). We accept any short token of letters,
digits and ``. _ : -`` that starts with a letter or digit, so ids of other VNFMs
and of tests still pass, but nothing that could walk a URL path (``/``, ``..``),
break a line, or outgrow a column: the store keeps ids in 255-character columns
and builds keys from them (``hook:<op-occ>:<state>`` in ``kv.key``, the dedup key), so
:data:`ID_MAX_LENGTH` leaves room for every prefix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import StringConstraints, WithJsonSchema

__all__ = ["ID_MAX_LENGTH", "ID_PATTERN", "ResourceId", "error_message", "is_resource_id"]

ID_MAX_LENGTH = 128
ID_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:-]{{0,{ID_MAX_LENGTH - 1}}}")
_WHAT = (
    f"must be an id of 1 to {ID_MAX_LENGTH} characters: letters, digits and . _ : - "
    "(starting with a letter or a digit)"
)


def is_resource_id(value: object) -> bool:
    """Whether ``value`` is an acceptable id (see the module's docstring)."""
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


_ANCHORED = f"^{ID_PATTERN.pattern}$"


def error_message(error: Mapping[str, Any]) -> str:
    """The message of one pydantic error: ours for an id that failed :data:`ResourceId`
    (which says what an id may be and never echoes the value: it may be megabytes long,
    or hold a line break), else pydantic's own."""
    if (
        error.get("type") == "string_pattern_mismatch"
        and (error.get("ctx") or {}).get("pattern") == _ANCHORED
    ):
        return _WHAT
    return str(error.get("msg", "invalid"))


# Checked inside pydantic-core (its Rust regex: ``^...$`` matches the whole string, with
# no line break allowed before ``$``), not by a Python callback per id: four ids a
# notification, ~30 % of its validation. :func:`error_message` words its errors.
ResourceId = Annotated[
    str,
    StringConstraints(pattern=_ANCHORED),
    WithJsonSchema({"type": "string", "pattern": _ANCHORED, "maxLength": ID_MAX_LENGTH}),
]
