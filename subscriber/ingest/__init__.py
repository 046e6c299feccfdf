"""Ingest sources: each parses what it receives and appends it to the event store.

Sources never run cluster work; the dispatcher's lanes do. The Kafka source is in
:mod:`subscriber.ingest.kafka`.
"""

from __future__ import annotations

__all__: list[str] = []
