"""haproxy backends on the masters of an HA cluster (the API behind VIP:16443).

``install_k8s_cluster.sh`` writes one ``server  masterNN <ip>:6443 check``
line per master under ``backend kubernetes-apiserver``. When a master is
healed, the surviving masters drop its line (so haproxy stops sending requests
to a dead API server) and get it back once it has rejoined. Both functions
change the file only when it differs, and reload haproxy only then
(``cluster.haproxy_reload``).
"""

from __future__ import annotations

import shlex

from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import API_PORT, checked_node_name, ip_address_of
from subscriber.kernel.ports import ClusterNode

__all__ = ["HAPROXY_CFG", "add_backend", "backend_line", "backends", "remove_backend"]

HAPROXY_CFG = "/etc/haproxy/haproxy.cfg"

# $1 = the node's name, $2 = its line ("" removes). Prints "changed" when the file changed.
_EDIT = r"""set -e
cfg=$CFG
[ -f "$cfg" ] || { echo "no $cfg" >&2; exit 3; }
tmp=$(mktemp)
awk -v name="$1" -v line="$2" '
  { lines[++n] = $0 }
  END {
    for (i = 1; i <= n; i++) {
      split(lines[i], f, " ")
      if (f[1] == "server" && f[2] == name) continue
      out[++m] = lines[i]
    }
    at = 0; inside = 0
    for (i = 1; i <= m; i++) {
      if (out[i] ~ /^backend kubernetes-apiserver/) { inside = 1; at = i; continue }
      if (inside && out[i] ~ /^[^[:space:]]/) inside = 0
      if (inside && out[i] ~ /^[[:space:]]*server[[:space:]]/) at = i
    }
    if (line != "" && at == 0) {
      print "no backend kubernetes-apiserver in the configuration" > "/dev/stderr"; exit 4
    }
    for (i = 1; i <= m; i++) { print out[i]; if (line != "" && i == at) print line }
  }' "$cfg" > "$tmp" || { rm -f "$tmp"; exit 4; }
if cmp -s "$tmp" "$cfg"; then rm -f "$tmp"; exit 0; fi
cat "$tmp" > "$cfg"
rm -f "$tmp"
echo changed
"""


def backend_line(node: ClusterNode) -> str:
    """The backend line of master ``node``, as the install script writes it."""
    name = checked_node_name(node.name, "a master")
    return f"    server  {name} {ip_address_of(node.nic_ip, f'master {name}')}:{API_PORT} check"


async def backends(shell: NodeShell, master: ClusterNode, *, step: str | None = None) -> list[str]:
    """The names of the API server backends in ``master``'s haproxy configuration.

    Raises:
        CommandFailed: the file cannot be read.
    """
    result = await shell.run(master, f"cat {HAPROXY_CFG}")
    names = []
    for line in result.check(step=step).stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "server":
            names.append(fields[1])
    return names


async def _edit(
    shell: NodeShell, master: ClusterNode, name: str, line: str, step: str | None
) -> bool:
    command = f"bash -c {shlex.quote(_EDIT)} haproxy {shlex.quote(name)} {shlex.quote(line)}"
    result = await shell.run(master, command, env={"CFG": HAPROXY_CFG})
    changed = "changed" in result.check(step=step).stdout
    if changed and shell.settings.haproxy_reload:
        (await shell.run(master, shell.settings.haproxy_reload)).check(step=step)
    return changed


async def remove_backend(
    shell: NodeShell, master: ClusterNode, name: str, *, step: str | None = None
) -> bool:
    """Drop master ``name``'s backend from ``master``'s haproxy; True if it was there.

    Raises:
        CommandFailed: no configuration file, or the reload failed.
    """
    return await _edit(shell, master, name, "", step)


async def add_backend(
    shell: NodeShell, master: ClusterNode, node: ClusterNode, *, step: str | None = None
) -> bool:
    """Make ``master``'s haproxy send API requests to ``node`` too; True if it changed.

    An old line of the same name with another address is replaced.

    Raises:
        CommandFailed: no configuration file, or the reload failed.
    """
    current = await shell.run(master, f"cat {HAPROXY_CFG}")
    servers = [f for f in map(str.split, current.check(step=step).stdout.splitlines()) if f]
    ours = [f for f in servers if f[0] == "server" and len(f) > 1 and f[1] == node.name]
    if ours == [backend_line(node).split()]:
        return False
    return await _edit(shell, master, node.name, backend_line(node), step)
