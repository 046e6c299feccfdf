"""A SQLAlchemy plugin the test bed's Tacker loads from its database URL (``?plugin=``).

Tacker 16.0.0's v1 code is written for MySQL, and two of its habits break on
PostgreSQL, which the bed runs (Tacker's own v2 is fine there):

* it hands ``bytes`` to text columns (``jsonutils.dump_as_bytes`` of a VNF's
  ``scale_group``, the Fernet-encrypted password of a VIM ...). MySQL stores the text;
  psycopg2 sends a bytea, which PostgreSQL stores as ``\\x`` and hex digits, and Tacker
  can no longer read it back (a v1 SCALE fails on ``Expecting value``, every use of a
  registered VIM on ``InvalidToken``). Bytes parameters go as UTF-8 text instead (no
  column of Tacker's schema is bytea);
* its subscription query, which every v1 notification runs first, is ``select distinct
  subscription_uuid,filter from vnf_lcm_filters where ... order by
  notification_types_len desc, operation_types_len desc``: PostgreSQL refuses it (the
  ORDER BY of a SELECT DISTINCT must be selected, and json has no equality for
  DISTINCT), so no v1 notification is ever sent. The statement selects what its ORDER
  BY names and ``filter`` as text (what MySQL hands back, and what Tacker parses).

No other statement is touched. It lives in the test bed, on the bed's ``PYTHONPATH``;
Tacker is not changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import CreateEnginePlugin

_MYSQL = "select distinct subscription_uuid,filter from vnf_lcm_filters"
_POSTGRESQL = (
    "select distinct subscription_uuid, filter::text as filter,"
    " notification_types_len, operation_types_len from vnf_lcm_filters"
)


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value
    return value


def _params(parameters: Any) -> Any:
    if isinstance(parameters, Mapping):
        return {k: _text(v) for k, v in parameters.items()}
    if isinstance(parameters, list):  # executemany
        return [_params(p) for p in parameters]
    if isinstance(parameters, tuple):
        return tuple(_text(v) for v in parameters)
    return parameters


def _rewrite(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> tuple[str, Any]:
    if _MYSQL in statement:
        statement = statement.replace(_MYSQL, _POSTGRESQL)
    return statement, _params(parameters)


class Plugin(CreateEnginePlugin):
    def update_url(self, url: Any) -> Any:
        return url  # no arguments of its own (SQLAlchemy drops ``plugin`` itself)

    def engine_created(self, engine: Any) -> None:
        event.listen(engine, "before_cursor_execute", _rewrite, retval=True)
