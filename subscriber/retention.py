"""The pruner: ``serve``'s background retention of settled events (see subscriber.store.retention).

Every ``retention.interval`` (and once at start) it deletes the events
settled longer ago than ``retention.max_age``, with their jobs and steps, so
the store's size follows the traffic of that window, not the service's age.
"""

from __future__ import annotations

import asyncio
import logging
import time

from subscriber.config import RetentionSettings
from subscriber.lifecycle import Component
from subscriber.store import PruneCounts, Store

__all__ = ["Pruner"]

log = logging.getLogger(__name__)


class Pruner(Component):
    def __init__(self, store: Store, settings: RetentionSettings) -> None:
        super().__init__()
        self._store = store
        self._settings = settings
        self.last: PruneCounts | None = None
        self.runs = 0

    async def _start(self) -> None:
        self._spawn("retention", self._loop, restart=True)

    async def _stop(self) -> None:
        pass

    async def prune_once(self) -> PruneCounts:
        before = time.time() - self._settings.max_age
        counts = await self._store.retention.prune(before, batch=self._settings.batch)
        self.last, self.runs = counts, self.runs + 1
        if counts.events:
            log.info(
                "pruned settled events",
                extra={
                    "events": counts.events,
                    "jobs": counts.jobs,
                    "steps": counts.steps,
                    "max_age": self._settings.max_age,
                },
            )
        return counts

    async def _loop(self) -> None:
        while True:
            await self.prune_once()
            await asyncio.sleep(self._settings.interval)
