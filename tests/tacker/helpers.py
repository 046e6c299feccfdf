"""Helpers of the ``tacker`` tier (and ``e2e``, ``k8s``): additionalParams as Tacker keeps
them, and Tacker's hook scripts pointed at a ``serve``. ``serve`` beside the real Tacker
is :mod:`tests.testbed.tacker_serve`; driving Tacker itself is
:mod:`tests.testbed.tacker_api`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from tests.testbed import tacker_bed
from tests.testbed.tacker_serve import ServeProcess

__all__ = ["hooks_pointed_at", "k8s_params"]


def k8s_params(flavour: str) -> dict[str, Any]:
    """additionalParams in the v2 guide's shape (our service reads them, Tacker keeps them)."""
    return {
        "k8s_cluster_installation_param": {
            "master_node": {
                "vdu_id": "masterNode",
                "ssh_cp_name": "masterNode_CP1",
                "nic_cp_name": "masterNode_CP1",
                "username": "ubuntu",
                "password": "ubuntu",
                "cluster_cp_name": "vip_CP" if flavour == "complex" else "masterNode_CP1",
            },
            "worker_node": {
                "vdu_id": "workerNode",
                "ssh_cp_name": "workerNode_CP2",
                "nic_cp_name": "workerNode_CP2",
                "username": "ubuntu",
                "password": "ubuntu",
            },
        }
    }


@contextlib.contextmanager
def hooks_pointed_at(
    bed: tacker_bed.BedState,
    proc: ServeProcess,
    token: str,
    *,
    timeout: float,
    poll_interval: float,
) -> Iterator[None]:
    """Tacker's conductor's hook scripts pointed at ``proc`` (its hook token in a file of
    ``proc``'s directory); at the end the conductor's hook configuration is gone again, so
    that other tests run without the hooks."""
    token_file = proc.tmp / "hook-token"
    token_file.write_text(token)
    bed.hook_config.write_text(
        json.dumps(
            {
                "url": f"http://127.0.0.1:{proc.port}/lccn/hooks",
                "token_file": str(token_file),
                "timeout": timeout,
                "poll_interval": poll_interval,
            }
        )
    )
    try:
        yield
    finally:
        bed.hook_config.unlink(missing_ok=True)
