"""The process heap: keep the garbage collector off long-lived objects, bound glibc's
per-thread malloc arenas, give freed memory back."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import platform

__all__ = ["OLDEST_THRESHOLD", "freeze_long_lived", "limit_malloc_arenas", "trim_malloc"]

_M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def freeze_long_lived() -> int:
    """Collect once, then move every object alive now out of the collector's reach.

    A started service holds about 140k container objects from its imports
    and set-up (SQLAlchemy, pydantic, aiohttp, aiokafka). Every full
    collection walks all of them, about 90 ms on a CI machine, and a busy
    ingest loop triggers one every few seconds: a latency spike for HTTP
    callbacks and half the CPU of Kafka decoding. Frozen objects are only
    never collected, which these would not be anyway; whatever is created
    later is collected as usual.

    Full collections also come less often from now on (see
    :data:`OLDEST_THRESHOLD`); the young generations keep CPython's
    thresholds, whose pauses stay short.

    Returns:
        how many objects are frozen now.
    """
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, OLDEST_THRESHOLD)
    return gc.get_freeze_count()


# Middle-generation collections between two full ones (CPython: 10). CPython
# also waits until the objects promoted since the last full collection are a
# quarter of those it kept, but after a freeze it kept almost none, so every
# tenth middle collection became a full one: 43 of them, 0.8 s, in
# bench/kafka_ingest.py's 100k records (each 20-30 ms over the records in flight),
# against 5 with 100, and Kafka ingest 10-20 % faster (2026-11-28).
OLDEST_THRESHOLD = 100


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Have glibc's malloc use at most ``arenas`` arenas in this process (``MALLOC_ARENA_MAX``).

    glibc gives threads that allocate at once arenas of their own, up to eight per
    CPU, and memory freed in one arena serves only that arena again. The store's
    threads (a SQLite writer, four readers: their page caches and prepared
    statements) and the event loop's thread each kept their own free memory, ~2 MB
    of a serve's processes after a backlog. Their work is serialised on the GIL
    and SQLite's locks anyway. Call it before any thread starts; a
    ``MALLOC_ARENA_MAX`` set in the environment wins.

    Arguments:
        arenas: the most arenas malloc may use.

    Returns:
        whether the limit was set (``False``: not glibc, or the environment says).
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(_M_ARENA_MAX, arenas))


def trim_malloc() -> bool:
    """Give the pages glibc's malloc holds free back to the kernel (``malloc_trim``).

    A backlog worked off leaves a few MB freed inside malloc's arenas (SQLite's
    statements and pages, request and row buffers) that the process would otherwise
    keep resident until it needs them again. Cheap: well under a millisecond on
    serve's heaps.

    Returns:
        whether anything was given back (``False`` too where it is not glibc).
    """
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(ctypes.util.find_library("c"))
