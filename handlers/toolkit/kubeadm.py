"""kubeadm on the nodes: init, control-plane and worker joins, and the data a join needs.

Installs and joins go through ``/tmp/install_k8s_cluster.sh`` (the VNF package's
``script_path`` file, or our own: :func:`~handlers.toolkit.hosts.upload_scripts`),
with the arguments Tacker's drivers give it (``kubernetes_mgmt.py``)::

    -m <masters> -i <cluster ip> -p <pod cidr> -a <service cidr>            the main master
    -m <masters> -i <cluster ip> -p <pod cidr> -a <service cidr>
       -t <token> -s <CA hash> -k <certificate key>                         another master
    -w <worker ip> -i <cluster ip> -t <token> -s <CA hash>                  a worker

and the environment they give it (the proxy, ``ha_flag``), plus ``cluster.script_env``
and ``K8S_NODE_NAME``. Join tokens and certificate keys are secrets: they never go
on a command line (any user of a node sees those in ``ps``). They travel in the
environment, which the SSH executor sends on stdin (``LCCN_JOIN_TOKEN``,
``LCCN_CERTIFICATE_KEY``), and :func:`install_command` makes them the script's
``-t``/``-k`` arguments inside the shell that reads the script (``set --`` then
``.``), so the script sees exactly Tacker's argv while ``ps`` shows only
``"$LCCN_JOIN_TOKEN"``. They are also passed to ``secrets=`` so every message
masks them, and kept in memory only.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from pydantic import SecretStr

from handlers.toolkit.hosts import REMOTE_SCRIPT
from handlers.toolkit.install_report import InstallReport, parse_install_output
from handlers.toolkit.kubectl import is_member
from handlers.toolkit.proxy import environment, proxy_secrets
from handlers.toolkit.shell import ADMIN_CONF, NodeShell
from handlers.toolkit.topology import Topology
from subscriber.errors import PermanentStepError, TransientStepError
from subscriber.kernel.ports import ClusterNode

__all__ = [
    "CA_HASH",
    "KEY_VAR",
    "SANS_VAR",
    "TOKEN_VAR",
    "Anchor",
    "FromEnv",
    "JoinData",
    "anchor",
    "await_signed",
    "init_main_master",
    "install_command",
    "is_installed",
    "join_control_plane",
    "join_data",
    "join_worker",
    "joined",
    "script_env",
    "survey",
]

# The CA public-key hash of ``kubeadm join --discovery-token-ca-cert-hash``.
CA_HASH = (
    "openssl x509 -pubkey -noout -in /etc/kubernetes/pki/ca.crt | "
    "openssl pkey -pubin -outform der 2>/dev/null | openssl dgst -sha256 -hex | sed 's/^.* //'"
)


@dataclass(frozen=True, slots=True)
class JoinData:
    """What a node needs to join: a bootstrap token (secret) and the CA hash; a
    control-plane join also the certificate key (secret)."""

    token: SecretStr = field(repr=False)
    ca_hash: str
    certificate_key: SecretStr | None = field(default=None, repr=False)


TOKEN_VAR = "LCCN_JOIN_TOKEN"
KEY_VAR = "LCCN_CERTIFICATE_KEY"


@dataclass(frozen=True, slots=True)
class FromEnv:
    """An argument of the install script taken from the environment variable ``name``."""

    name: str


def install_command(*args: str | FromEnv) -> str:
    """The command that runs the install script with ``args`` as its argv.

    ``bash -c 'set -- ARGS; unset VARS; . "$0"' /tmp/install_k8s_cluster.sh``: the
    script runs in that bash with ``$0`` its path and ``"$@"`` exactly ``args``, as
    ``bash /tmp/install_k8s_cluster.sh ARGS`` would run it, but a :class:`FromEnv`
    argument is expanded there from the environment, so its value is never on a
    command line; the variables are unset before the script starts (its commands
    do not inherit them).
    """
    words = " ".join(f'"${a.name}"' if isinstance(a, FromEnv) else shlex.quote(a) for a in args)
    names = " ".join(a.name for a in args if isinstance(a, FromEnv))
    body = f"set -- {words}; " + (f"unset {names}; " if names else "") + '. "$0"'
    return f"bash -c {shlex.quote(body)} {REMOTE_SCRIPT}"


SANS_VAR = "K8S_APISERVER_CERT_EXTRA_SANS"


def script_env(shell: NodeShell, topo: Topology, node: ClusterNode) -> dict[str, str]:
    """The environment of the install script on ``node``: ``cluster.script_env``, the
    node name, ``ha_flag``, the cluster's proxy (kubeadm's environment; secret:
    pass :func:`~handlers.toolkit.proxy.proxy_secrets` with it) and, with
    ``cluster_fip_name``, the floating IP as an extra SAN of the API server's
    certificate (``K8S_APISERVER_CERT_EXTRA_SANS``: the endpoint written back is that
    address, so a client checking the CA must find it in the certificate)."""
    env = dict(shell.settings.script_env)
    env.update(environment(shell.params, topo))
    env["K8S_NODE_NAME"] = node.name
    env["ha_flag"] = "True" if topo.ha else "False"
    if topo.cluster_fip:
        sans = [s for s in env.get(SANS_VAR, "").split(",") if s]
        env[SANS_VAR] = ",".join(dict.fromkeys([*sans, topo.cluster_fip]))
    return env


async def is_installed(shell: NodeShell, node: ClusterNode) -> bool:
    """Whether the install script finished on ``node`` (it writes /tmp/installed last)."""
    return (await shell.run(node, "test -f /tmp/installed")).ok


async def joined(shell: NodeShell, via: ClusterNode, node: ClusterNode) -> bool:
    """Whether ``node`` is a cluster member (asked on ``via``) and finished its install.

    Asked of a node about itself (``via`` is ``node``), both are one command.
    """
    if via.name == node.name:
        members = await _members_seen(shell, node)
        return members is not None and node.name in members
    return await is_member(shell, via, node.name) and await is_installed(shell, node)


async def _members_seen(shell: NodeShell, master: ClusterNode) -> frozenset[str] | None:
    """The names of the Nodes ``master`` sees, once it finished its install (one command);
    ``None`` when it did not, or kubectl failed there."""
    command = f"test -f /tmp/installed && {shell.kubectl('get nodes -o name')}"
    result = await shell.run(master, command)
    if not result.ok:
        return None
    return frozenset(line.removeprefix("node/") for line in result.stdout.split() if line.strip())


@dataclass(frozen=True, slots=True)
class Anchor:
    """A master that is a member and finished its install, and the Nodes it saw then."""

    node: ClusterNode
    members: frozenset[str]


async def survey(
    shell: NodeShell, topo: Topology, *, exclude: Collection[str] = ()
) -> Anchor | None:
    """The first master (in the topology's order) that is a member and finished its
    install, with the names of the Nodes it sees (one command a master asked).

    The master day-2 operations ask and join through: after a heal it may not
    be the topology's main master.

    Arguments:
        exclude: names of masters not to consider (those being replaced).
    """
    for master in topo.masters:
        if master.name in exclude:
            continue
        members = await _members_seen(shell, master)
        if members is not None and master.name in members:
            return Anchor(master, members)
    return None


async def anchor(
    shell: NodeShell, topo: Topology, *, exclude: Collection[str] = ()
) -> ClusterNode | None:
    """The master of :func:`survey` (``None``: no master is ready)."""
    found = await survey(shell, topo, exclude=exclude)
    return found.node if found is not None else None


# kubeadm's upload-certs phase, given the master's own address: without it
# kubeadm looks for a default route to pick one and fails on hosts that have
# none ("cannot use 0.0.0.0 as the bind address"), and without a version it asks
# dl.k8s.io. The configuration's apiVersion is the one this kubeadm prints.
_UPLOAD_CERTS = r"""set -e
api=$("$KUBEADM" config print init-defaults 2>/dev/null |
  awk '$1 == "apiVersion:" && $2 ~ /^kubeadm/ {print $2; exit}')
[ -n "$api" ] || { echo "kubeadm config print init-defaults printed no apiVersion" >&2; exit 3; }
version=$("$KUBEADM" version -o short)
config=$(mktemp)
trap 'rm -f "$config"' EXIT
{
  printf 'apiVersion: %s\nkind: InitConfiguration\n' "$api"
  printf 'localAPIEndpoint:\n  advertiseAddress: %s\n---\n' "$ADDRESS"
  printf 'apiVersion: %s\nkind: ClusterConfiguration\n' "$api"
  printf 'kubernetesVersion: %s\n' "$version"
} > "$config"
"$KUBEADM" init phase upload-certs --upload-certs --config "$config"
"""


# Waits until the controller-manager's bootstrap signer has signed the cluster-info
# ConfigMap for token id $1, so that a join's discovery succeeds at its first try:
# kubeadm 1.20 asks again only every 5 s, and a new cluster's signer starts ~13 s after
# the init (docs/benchmarks.md). Best effort: a kubectl that cannot read the ConfigMap,
# or no signature within SIGNED_TRIES polls, ends the wait (status 1) and kubeadm polls
# itself.
_AWAIT_SIGNED = (
    r"""await_signed() {
  local i=0 v
  while [ "$i" -lt "${SIGNED_TRIES:-80}" ]; do
    v=$("$KUBECTL" --kubeconfig """
    + ADMIN_CONF
    + r""" -n kube-public get configmap cluster-info \
        -o "jsonpath={.data.jws-kubeconfig-$1}" 2>/dev/null) || return 1
    [ -n "$v" ] && return 0
    i=$((i + 1))
    sleep 0.25
  done
  return 1
}
"""
)

# A bootstrap token, the CA hash and, with UPLOAD_CERTS=1, a fresh certificate key
# (kubeadm's upload-certs phase, see _UPLOAD_CERTS), in one command. The values are
# printed only once all succeeded, so a failure's message (stderr, else stdout)
# never holds one; printf is a builtin (no argv in ps).
_JOIN_DATA = (
    _AWAIT_SIGNED
    + r"""set -eo pipefail
token=$("$KUBEADM" token create | tail -n 1)
await_signed "${token%%.*}" || true
hash=$("""
    + CA_HASH
    + r""")
key=
if [ "${UPLOAD_CERTS:-0}" = 1 ]; then
  key=$(bash -c "$UPLOAD_SCRIPT" | tail -n 1)
  [ -n "$key" ] || { echo "kubeadm upload-certs printed no certificate key" >&2; exit 3; }
fi
printf 'token:%s\nca_hash:%s\ncertificate_key:%s\n' "$token" "$hash" "$key"
"""
)


async def join_data(
    shell: NodeShell,
    via: ClusterNode,
    *,
    certificate_key: bool = False,
    secrets: Sequence[str] = (),
    step: str | None = None,
) -> JoinData:
    """A fresh bootstrap token and the CA public-key hash, from master ``via`` (one command).

    Arguments:
        certificate_key: also upload the control-plane certificates again and
            return their key (:attr:`JoinData.certificate_key`; a control-plane join).
        secrets: values to mask in the messages about the command.

    Raises:
        CommandFailed: kubeadm or openssl failed on ``via``.
        PermanentStepError: their output is not a token and a SHA-256 hash (and a key).
    """
    result = await shell.run(
        via,
        f"bash -c {shlex.quote(_JOIN_DATA)}",
        env={
            "KUBEADM": shell.settings.kubeadm,
            "KUBECTL": shell.settings.kubectl,
            "UPLOAD_CERTS": "1" if certificate_key else "0",
            "UPLOAD_SCRIPT": _UPLOAD_CERTS,
            "ADDRESS": via.nic_ip,
        },
        secrets=secrets,
    )
    printed = dict(line.partition(":")[::2] for line in result.check(step=step).stdout.splitlines())
    token, ca_hash = printed.get("token", "").strip(), printed.get("ca_hash", "").strip()
    key = printed.get("certificate_key", "").strip()
    if not token or len(ca_hash) != 64 or (certificate_key and not key):
        raise PermanentStepError(
            f"could not read the join token and CA hash on {via.name}", step=step
        )
    return JoinData(SecretStr(token), ca_hash, SecretStr(key) if key else None)


async def await_signed(shell: NodeShell, via: ClusterNode, token: SecretStr) -> bool:
    """Wait (one command on master ``via``, ~30 s at most) until the cluster-info ConfigMap
    holds the bootstrap signer's signature for ``token``, which every join's discovery
    needs: the joins that follow then succeed at their first try instead of at kubeadm's
    next 5 s poll. Only the token's public id leaves this process (the ConfigMap's key
    names it); the secret part does not.

    Returns:
        Whether the signature was seen; ``False`` (never an error) when it could not
        be read or did not come: the joins then wait for it themselves.
    """
    token_id = token.get_secret_value().partition(".")[0]
    result = await shell.run(
        via,
        "bash -c " + shlex.quote(_AWAIT_SIGNED + 'await_signed "$TOKEN_ID"\n'),
        env={"KUBECTL": shell.settings.kubectl, "TOKEN_ID": token_id},
    )
    return result.ok


def _cluster_args(shell: NodeShell, topo: Topology, first: ClusterNode) -> list[str]:
    """``-m`` lists ``first`` first: the script makes the first master the one that inits."""
    p = shell.params
    ordered = [first, *(m for m in topo.masters if m.name != first.name)]
    masters = ",".join(m.nic_ip for m in ordered)
    return ["-m", masters, "-i", topo.cluster_ip, "-p", p.pod_cidr, "-a", p.service_cidr]


async def init_main_master(
    shell: NodeShell,
    topo: Topology,
    *,
    main: ClusterNode | None = None,
    script: str = "install_k8s_cluster.sh",
    step: str | None = None,
) -> InstallReport:
    """``kubeadm init`` on the main master through the install script (not idempotent alone:
    guard it with :func:`joined`).

    Arguments:
        main: the master that inits (default: the topology's main master).
        script: the script as the error names it (which one was uploaded).

    Returns:
        What the script printed: server URL, CA, its hash (the token and
        certificate key in it are secrets).

    Raises:
        CommandFailed: the script failed; PermanentStepError: its output
            lacks the lines the caller needs.
    """
    main = main or topo.main
    result = await shell.run(
        main,
        install_command(*_cluster_args(shell, topo, main)),
        timeout=shell.settings.install_timeout,
        env=script_env(shell, topo, main),
        secrets=proxy_secrets(shell.params),
    )
    result.check(step=step)
    try:
        return parse_install_output(result.stdout)
    except ValueError as exc:
        raise PermanentStepError(f"{script} on {main.name}: {exc}", step=step) from None


async def join_control_plane(
    shell: NodeShell,
    topo: Topology,
    node: ClusterNode,
    *,
    via: ClusterNode | None = None,
    data: JoinData | None = None,
    step: str | None = None,
) -> JoinData:
    """Join ``node`` as a control-plane member (HA) with ``data``, or with a fresh token,
    CA hash and certificate key asked of ``via`` when ``data`` holds no certificate key.

    Arguments:
        via: a master of the cluster that hands out the join data (default: the
            main master); it comes first in the script's master list, so ``node``
            joins even when it is the topology's main master (healed).
        data: join data of this cluster learned earlier in the job run.

    Returns:
        The join data used (secrets: memory only).

    Raises:
        CommandFailed: kubeadm or the script failed.
    """
    via = via or topo.main
    if data is None or data.certificate_key is None:
        data = await join_data(shell, via, certificate_key=True, step=step)
    token = data.token.get_secret_value()
    assert data.certificate_key is not None  # asked for
    key = data.certificate_key.get_secret_value()
    args = (FromEnv(TOKEN_VAR), "-s", data.ca_hash, "-k", FromEnv(KEY_VAR))
    result = await shell.run(
        node,
        install_command(*_cluster_args(shell, topo, via), "-t", *args),
        timeout=shell.settings.install_timeout,
        env={**script_env(shell, topo, node), TOKEN_VAR: token, KEY_VAR: key},
        secrets=[token, key, *proxy_secrets(shell.params)],
    )
    result.check(step=step)
    return data


async def join_worker(
    shell: NodeShell,
    topo: Topology,
    node: ClusterNode,
    data: JoinData,
    *,
    via: ClusterNode | None = None,
    step: str | None = None,
) -> None:
    """Join ``node`` as a worker with ``data`` (the VIP for HA, else the main master's :6443).

    A join cut off earlier (crash, kill) can still finish on the node and
    register it under our feet, so this one then fails: that case is raised
    as transient, and the retry sees the node joined.

    Raises:
        TransientStepError: the join failed but the node is registered.
        CommandFailed: the join failed.
    """
    via = via or topo.main
    join_ip = topo.cluster_ip if topo.ha else topo.main.nic_ip
    token = data.token.get_secret_value()
    result = await shell.run(
        node,
        install_command(
            "-w", node.nic_ip, "-i", join_ip, "-t", FromEnv(TOKEN_VAR), "-s", data.ca_hash
        ),
        timeout=shell.settings.install_timeout,
        env={**script_env(shell, topo, node), TOKEN_VAR: token},
        secrets=[token, *proxy_secrets(shell.params)],
    )
    if not result.ok and await is_member(shell, via, node.name):
        raise TransientStepError(
            f"{node.name} was registered by an earlier join that was cut off; checking again",
            step=step,
        )
    result.check(step=step)
