"""The cluster inventory: which VNFC is which Kubernetes node, per VNF instance.

Written by the cluster handlers' discovery (through the store's writer, like
every write of the process) and read by later operations (scale, heal) and
operators. Node name <-> VNFC id <-> stack id <-> IPs <-> role.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from subscriber.kernel.ports import ClusterNode
from subscriber.store.database import Database
from subscriber.store.tables import cluster_nodes
from subscriber.store.writer import WriteQueue

__all__ = ["InventoryStore"]


def _node(row: Any) -> ClusterNode:
    return ClusterNode(
        name=row.node_name,
        role=row.role,
        vnfc_id=row.vnfc_id,
        nic_ip=row.nic_ip,
        ssh_ip=row.ssh_ip,
        vdu_id=row.vdu_id,
        stack_id=row.stack_id,
        server_id=row.server_id,
        compute_host=row.compute_host,
        cluster_ip=row.cluster_ip,
    )


class InventoryStore:
    """Implements :class:`handlers.ports.ClusterInventory` on the ``cluster_nodes`` table."""

    def __init__(self, db: Database, *, writer: WriteQueue) -> None:
        self._db = db
        self._writer = writer

    async def replace(self, vnf_instance_id: str, nodes: Sequence[ClusterNode]) -> None:
        """Make the instance's inventory exactly ``nodes`` (one transaction)."""
        now = time.time()
        rows = [
            {
                "vnf_instance_id": vnf_instance_id,
                "node_name": n.name,
                "role": n.role,
                "vnfc_id": n.vnfc_id,
                "vdu_id": n.vdu_id,
                "stack_id": n.stack_id,
                "server_id": n.server_id,
                "nic_ip": n.nic_ip,
                "ssh_ip": n.ssh_ip,
                "compute_host": n.compute_host,
                "cluster_ip": n.cluster_ip,
                "updated_at": now,
            }
            for n in nodes
        ]

        def write(conn: Connection) -> None:
            conn.execute(
                sa.delete(cluster_nodes).where(cluster_nodes.c.vnf_instance_id == vnf_instance_id)
            )
            if rows:
                conn.execute(sa.insert(cluster_nodes), rows)

        await self._writer.run(write)

    async def nodes(self, vnf_instance_id: str) -> list[ClusterNode]:
        """The instance's nodes, masters first, then by name."""

        def read(conn: Connection) -> list[ClusterNode]:
            result = conn.execute(
                sa.select(cluster_nodes)
                .where(cluster_nodes.c.vnf_instance_id == vnf_instance_id)
                .order_by(cluster_nodes.c.role, cluster_nodes.c.node_name)
            )
            return [_node(r) for r in result]

        return await self._db.read(read)

    async def forget(self, vnf_instance_id: str) -> int:
        """Delete the instance's inventory; the number of nodes removed."""

        def write(conn: Connection) -> int:
            result = conn.execute(
                sa.delete(cluster_nodes).where(cluster_nodes.c.vnf_instance_id == vnf_instance_id)
            )
            return int(result.rowcount or 0)

        return await self._writer.run(write)
