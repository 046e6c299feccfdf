"""Run the simulated OpenStack: ``python -m tests.testbed.openstack_sim [--port P] ...``.

Prints one JSON line ``{"url": ..., "auth_url": ...}`` on stdout once it listens, then
serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys

from .app import OpenStackSim, SimConfig


async def _main(args: argparse.Namespace) -> None:
    defaults = SimConfig()
    config = SimConfig(
        server_pool=args.server_pool or defaults.server_pool,
        vip_pool=args.vip_pool or defaults.vip_pool,
        username=args.username or defaults.username,
        password=args.password or defaults.password,
        project_name=args.project or defaults.project_name,
        loop_volumes=args.loop_volumes,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with OpenStackSim(config, host="127.0.0.1", port=args.port) as sim:
        print(json.dumps({"url": sim.url, "auth_url": sim.auth_url}), flush=True)
        await stop.wait()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tests.testbed.openstack_sim", description=__doc__)
    p.add_argument("--port", type=int, default=0, help="0 = a free port (default)")
    p.add_argument("--server-pool", help="addresses for servers' ports, e.g. 10.77.0.11-10.77.0.40")
    p.add_argument("--vip-pool", help="addresses for ports no server uses (VIPs)")
    p.add_argument("--username")
    p.add_argument("--password")
    p.add_argument("--project")
    p.add_argument(
        "--loop-volumes", action="store_true", help="back Cinder volumes with loop devices (root)"
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(p.parse_args()))
    sys.exit(0)


if __name__ == "__main__":
    main()
