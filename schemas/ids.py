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
from typing import Annotated

from pydantic import AfterValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

__all__ = ["ID_MAX_LENGTH", "ID_PATTERN", "ResourceId", "is_resource_id"]

ID_MAX_LENGTH = 128
ID_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:-]{{0,{ID_MAX_LENGTH - 1}}}")
_WHAT = (
    f"must be an id of 1 to {ID_MAX_LENGTH} characters: letters, digits and . _ : - "
    "(starting with a letter or a digit)"
)


def is_resource_id(value: object) -> bool:
    """Whether ``value`` is an acceptable id (see the module's docstring)."""
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def _check(value: str) -> str:
    if not is_resource_id(value):
        # The value is not echoed: it may be megabytes long, or hold a line break.
        raise PydanticCustomError("resource_id", _WHAT)
    return value


ResourceId = Annotated[
    str,
    AfterValidator(_check),
    WithJsonSchema(
        {"type": "string", "pattern": f"^{ID_PATTERN.pattern}$", "maxLength": ID_MAX_LENGTH}
    ),
]
