"""The same store on the machine's PostgreSQL (the multi-replica backend)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.conftest import ServiceFactory, callback_url, wait_settled
from tests.factories import op_occ, uid
from tests.recorders import Recorder, registry_with

pytestmark = [pytest.mark.postgres, pytest.mark.asyncio]


@pytest.fixture
def db_url(pg_url: str) -> str:  # PostgreSQL alone: the multi-replica backend
    return pg_url


async def test_ingest_dedup_and_ordered_jobs_on_postgres(
    start_service: ServiceFactory, http: aiohttp.ClientSession
) -> None:
    recorder = Recorder()
    svc = await start_service(routing=registry_with(recorder), reorder_window=0.3)
    inst, occ = uid(), uid()
    bodies = [
        op_occ(instance=inst, op_occ_id=occ, state=s)
        for s in ("COMPLETED", "STARTING", "PROCESSING")
    ]
    bodies += [dict(b, id=uid()) for b in bodies]

    async def send(body: dict[str, object]) -> int:
        async with http.post(callback_url(svc), json=body) as resp:
            return resp.status

    assert set(await asyncio.gather(*(send(b) for b in bodies))) == {204}
    events = await wait_settled(svc, 3)
    assert len(events) == 3 and {e.status for e in events} == {"done"}
    assert [s for _, _, s in recorder.runs] == ["STARTING", "PROCESSING", "COMPLETED"]
    assert await svc.store.schema_is_current()
