"""The store tier: a test that takes ``db_url`` (or ``store``, ``start_service``) runs on a
SQLite file and on a fresh PostgreSQL database."""

from tests.backends import db_url

__all__ = ["db_url"]
