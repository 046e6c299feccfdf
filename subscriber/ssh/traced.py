"""An SSH executor that records a span per command (see :mod:`subscriber.tracing`).

Wraps any :class:`~subscriber.kernel.ports.SshExecutor` (the pool, or a test's fake),
so the service puts it in front only when tracing is on, and pays nothing otherwise.
A span names the host and the command's program, never its arguments: they may carry
tokens and passwords (``kubeadm join --token ...``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Unpack

from subscriber import tracing
from subscriber.kernel.ports import CommandResult, RunOptions, SshExecutor, SshTarget, UploadOptions

__all__ = ["TracedSsh"]


class TracedSsh:
    """``inner`` with a ``ssh`` span around each command and upload."""

    def __init__(self, inner: SshExecutor) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"TracedSsh({self.inner!r})"

    async def run(
        self, target: SshTarget, command: str, **options: Unpack[RunOptions]
    ) -> CommandResult:
        attrs = {"net.peer.name": target.host, "lccn.command": tracing.command_name(command)}
        with tracing.span("ssh", attrs) as span:
            result = await self.inner.run(target, command, **options)
            span.set("lccn.exit_status", result.exit_status)
            return result

    async def upload(
        self,
        target: SshTarget,
        source: bytes | str | Path,
        remote_path: str,
        **options: Unpack[UploadOptions],
    ) -> None:
        attrs = {"net.peer.name": target.host, "lccn.command": "upload"}
        with tracing.span("ssh", attrs):
            await self.inner.upload(target, source, remote_path, **options)
