"""The cluster's HTTP(S) proxy on the nodes (``k8s_cluster_installation_param.proxy``).

Three consumers, as Tacker's v1 driver serves them (TACKER.md §1.2, §1.5):

* the package manager: ``/etc/apt/apt.conf.d/95lccn-proxy``
  (``Acquire::http::Proxy`` / ``Acquire::https::Proxy``);
* the container runtime: the systemd drop-in
  ``/etc/systemd/system/containerd.service.d/http-proxy.conf``
  (``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY``); containerd is restarted when
  the drop-in changed and systemd runs;
* kubeadm (and the Helm script): the environment of ``install_k8s_cluster.sh``
  (:func:`environment`), sent over stdin like every secret. ``/etc/environment``
  is not written: it is world-readable and proxy URLs may hold a password.

``no_proxy`` is the user's list plus the cluster's own addresses: every node's
NIC and SSH address, the cluster IP (VIP) and floating IP, the pod and service
CIDRs, ``localhost``/``127.0.0.1``, the in-cluster DNS suffixes, and
``k8s_node_cidr`` (the CIDR itself and, when it has at most 256 addresses,
each of its hosts: "all its ip will be set into no_proxy", seed 000, for
clients that do not understand CIDRs).

The files are written whole from stdin and replaced only when their content
differs (a rerun changes nothing); they are mode 600 when a URL carries
credentials. The URLs never go on a command line nor into a step result.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology
from schemas.cluster_params import K8sClusterInstallationParams, ProxyParams
from subscriber.kernel.ports import ClusterNode

__all__ = [
    "APT_CONF",
    "CONTAINERD_DROPIN",
    "NodeProxyResult",
    "apply_proxy",
    "apt_conf",
    "containerd_dropin",
    "environment",
    "no_proxy",
    "proxy_secrets",
]

APT_CONF = "/etc/apt/apt.conf.d/95lccn-proxy"
CONTAINERD_DROPIN = "/etc/systemd/system/containerd.service.d/http-proxy.conf"
_EXPAND_LIMIT = 256  # k8s_node_cidr hosts listed one by one up to this many addresses
_HEADER = "lccn-subscriber: k8s_cluster_installation_param.proxy (rewritten on every operation)"

# containerd reads its environment at start: restart it if it runs (systemd only).
_RESTART = r"""if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  systemctl daemon-reload
  systemctl try-restart containerd.service
  echo restarted
else
  echo "no systemd: containerd not restarted"
fi
"""


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item, None)
    return list(seen)


def no_proxy(params: K8sClusterInstallationParams, topo: Topology) -> str:
    """The ``no_proxy`` list for the cluster's nodes (see the module's docstring)."""
    proxy = params.proxy or ProxyParams()
    entries = ["localhost", "127.0.0.1", *_split(proxy.no_proxy)]
    if proxy.k8s_node_cidr:
        network = ipaddress.ip_network(proxy.k8s_node_cidr, strict=False)
        entries.append(str(network))
        if network.num_addresses <= _EXPAND_LIMIT:
            entries.extend(str(ip) for ip in network.hosts())
    for node in topo.nodes:
        entries += [node.nic_ip, node.ssh_ip]
    entries.append(topo.cluster_ip)
    if topo.cluster_fip:
        entries.append(topo.cluster_fip)
    entries += [params.pod_cidr, params.service_cidr, ".svc", ".cluster.local"]
    return ",".join(_unique(entries))


def environment(params: K8sClusterInstallationParams, topo: Topology) -> dict[str, str]:
    """``http_proxy``/``https_proxy``/``no_proxy`` (both cases) for a script on the nodes;
    empty without a proxy. Send it as ``env=`` (stdin), with :func:`proxy_secrets`."""
    proxy = params.proxy
    if proxy is None or not proxy.urls:
        return {}
    env: dict[str, str] = {}
    for name, value in (("http_proxy", proxy.http_proxy), ("https_proxy", proxy.https_proxy)):
        if value:
            env[name] = env[name.upper()] = value
    env["no_proxy"] = env["NO_PROXY"] = no_proxy(params, topo)
    return env


def proxy_secrets(params: K8sClusterInstallationParams) -> tuple[str, ...]:
    """What to mask in every message about a command that sees the proxy: the URLs and
    their passwords (raw and percent-decoded)."""
    proxy = params.proxy
    if proxy is None:
        return ()
    out: list[str] = []
    for url in proxy.urls:
        out.append(url)
        try:
            password = urlsplit(url).password
        except ValueError:
            password = None
        if password:
            out += [password, unquote(password)]
    return tuple(_unique(out))


def _has_credentials(proxy: ProxyParams) -> bool:
    return any("@" in (urlsplit(u).netloc or "") for u in proxy.urls)


def apt_conf(proxy: ProxyParams) -> str:
    """The apt configuration file (apt has no ``no_proxy``: it asks the proxy for all)."""
    lines = [f"// {_HEADER}"]
    if proxy.http_proxy:
        lines.append(f'Acquire::http::Proxy "{proxy.http_proxy}";')
    if proxy.https_proxy:
        lines.append(f'Acquire::https::Proxy "{proxy.https_proxy}";')
    return "\n".join(lines) + "\n"


def _unit_value(text: str) -> str:
    # systemd expands %-specifiers and C escapes inside Environment="...".
    return text.replace("\\", "\\\\").replace("%", "%%").replace('"', '\\"')


def containerd_dropin(params: K8sClusterInstallationParams, topo: Topology) -> str:
    """The containerd systemd drop-in with the proxy variables."""
    proxy = params.proxy or ProxyParams()
    lines = [f"# {_HEADER}", "[Service]"]
    for name, value in (
        ("HTTP_PROXY", proxy.http_proxy),
        ("HTTPS_PROXY", proxy.https_proxy),
        ("NO_PROXY", no_proxy(params, topo)),
    ):
        if value:
            lines.append(f'Environment="{name}={_unit_value(value)}"')
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class NodeProxyResult:
    """What :func:`apply_proxy` did on one node (no URL in it)."""

    node: str
    changed: tuple[str, ...] = ()
    containerd_restarted: bool = False
    notes: tuple[str, ...] = field(default=())

    def as_json(self) -> dict[str, object]:
        return {
            "changed": list(self.changed),
            "containerdRestarted": self.containerd_restarted,
            "notes": list(self.notes),
        }


async def _write(
    shell: NodeShell,
    node: ClusterNode,
    path: str,
    content: str,
    mode: str,
    *,
    step: str | None,
) -> bool:
    return await shell.write_file(
        node, path, content, mode, secrets=proxy_secrets(shell.params), step=step
    )


async def apply_proxy(
    shell: NodeShell, topo: Topology, node: ClusterNode, *, step: str | None = None
) -> NodeProxyResult:
    """Write the apt and containerd proxy files on ``node``; restart containerd if its
    drop-in changed. Convergent: a rerun with the same parameters changes nothing.

    Raises:
        CommandFailed: writing failed on the node (the message masks the URLs);
        SshError: no connection.
    """
    proxy = shell.params.proxy
    if proxy is None or not proxy.urls:
        return NodeProxyResult(node.name, notes=("no proxy URL in the parameters",))
    mode = "600" if _has_credentials(proxy) else "644"
    changed: list[str] = []
    if await _write(shell, node, APT_CONF, apt_conf(proxy), mode, step=step):
        changed.append(APT_CONF)
    dropin = containerd_dropin(shell.params, topo)
    restarted, notes = False, []
    if await _write(shell, node, CONTAINERD_DROPIN, dropin, mode, step=step):
        changed.append(CONTAINERD_DROPIN)
        out = (await shell.run(node, f"sh -c {shlex.quote(_RESTART)}")).check(step=step)
        restarted = out.stdout.strip().splitlines()[-1:] == ["restarted"]
        if not restarted:
            notes.append(out.stdout.strip())
    return NodeProxyResult(node.name, tuple(changed), restarted, tuple(notes))
