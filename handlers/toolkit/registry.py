"""Private container registries on the nodes (``private_registry_connection_info``).

Tacker's v1 driver copies each registry's CA (``certificate_path``, a file of
the VNF package) to ``/etc/docker/certs.d/<server>/``, appends ``hosts_string``
to ``/etc/hosts`` and runs ``docker login`` with the password on its command
line (TACKER.md §1.6). Our nodes run containerd, so each node gets:

* ``/etc/containerd/certs.d/<server>/ca.crt`` (the CA from the package, when
  given) and ``hosts.toml`` naming the registry's scheme (``connection_type``
  ``"0"`` = HTTP, ``"1"`` = HTTPS) and that CA; ``config_path`` of containerd's
  CRI registry section is pointed at ``/etc/containerd/certs.d`` when it is the
  default empty value (containerd restarted then);
* the ``hosts_string`` lines in a block of ``/etc/hosts`` between two marker
  lines, rewritten whole (the nodes' block of :mod:`handlers.toolkit.hosts` is
  another one);
* the credentials in :data:`AUTH_CONFIG`, the kubelet's Docker-config keyring
  (``{"auths": {"<server>": {"auth": base64(user:password)}}}``, mode 600,
  root only): the kubelet hands them to containerd with every image pull of
  the registry (CRI ``PullImage`` auth). The file holds exactly the
  parameters' registries.

Then, from the node, an authenticated ``GET /v2/`` with the node's CA and
``/etc/hosts`` (curl, its ``user`` given in a config file on stdin) proves the
registry accepts the credentials; a refusal fails the step, naming the server
and the user, never the password.

Files are written from stdin and replaced only when they differ (a rerun
changes nothing). No password goes on a command line, into a step result or
into a message.
"""

from __future__ import annotations

import base64
import json
import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from handlers.toolkit.proxy import environment, proxy_secrets
from handlers.toolkit.shell import NodeShell
from handlers.toolkit.topology import Topology
from schemas.cluster_params import PrivateRegistryParams
from subscriber.errors import PermanentStepError, TransientStepError
from subscriber.kernel.ports import ClusterNode

__all__ = [
    "AUTH_CONFIG",
    "CERTS_D",
    "CONTAINERD_CONFIG",
    "HOSTS_BEGIN",
    "HOSTS_END",
    "NodeRegistryResult",
    "apply_registries",
    "auth_config",
    "ca_path",
    "curl_config",
    "hosts_lines",
    "hosts_toml",
    "registry_secrets",
    "verify_login",
]

CERTS_D = "/etc/containerd/certs.d"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
AUTH_CONFIG = "/var/lib/kubelet/config.json"
HOSTS_BEGIN = "# lccn-subscriber registries begin"
HOSTS_END = "# lccn-subscriber registries end"
_HEADER = "# lccn-subscriber: k8s_cluster_installation_param.private_registry_connection_info"
VERIFY_TIMEOUT = 20  # seconds curl may take for one GET /v2/

# Our block of /etc/hosts replaced by stdin (kept in place of the old one, or appended).
_HOSTS = r"""set -e
tmp=$(mktemp)
new=$(mktemp)
trap 'rm -f "$tmp" "$new"' EXIT
cat > "$new"
awk -v b="$1" -v e="$2" -v f="$new" '
  function ours() { while ((getline line < f) > 0) print line; done = 1 }
  $0 == b { inside = 1; if (!done) ours(); next }
  $0 == e { inside = 0; next }
  !inside { print }
  END { if (!done) ours() }
' /etc/hosts > "$tmp"
if cmp -s "$tmp" /etc/hosts; then echo unchanged; else cat "$tmp" > /etc/hosts; echo changed; fi
"""
# containerd reads certs.d only when config_path names it; the default config
# (``containerd config default``, 1.x) has it empty. Prints changed/unchanged/a note.
_CONFIG_PATH = r"""set -e
conf=$1 dir=$2
if [ ! -f "$conf" ]; then echo "no $conf: containerd's config_path not checked"; exit 0; fi
if grep -Eq "^[[:space:]]*config_path[[:space:]]*=[[:space:]]*[\"'][^\"']*$dir" "$conf"; then
  echo unchanged
elif grep -Eq '^[[:space:]]*config_path[[:space:]]*=[[:space:]]*""' "$conf"; then
  sed -i -E "s|^([[:space:]]*config_path[[:space:]]*=[[:space:]]*)\"\"|\1\"$dir\"|" "$conf"
  echo changed
else
  echo "$conf sets no empty config_path: hosts.toml may be ignored; set config_path = \"$dir\""
fi
"""
_RESTART = r"""if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  systemctl try-restart containerd.service
  echo restarted
else
  echo "no systemd: containerd not restarted"
fi
"""
# curl's own exit status for "the registry never answered": worth a retry.
_UNREACHABLE = {7: "connection refused", 28: "timed out"}


def ca_path(server: str) -> str:
    return posixpath.join(CERTS_D, server, "ca.crt")


def _scheme(registry: PrivateRegistryParams) -> str:
    return "https" if registry.connection_type == "1" else "http"


def _url(registry: PrivateRegistryParams) -> str:
    return f"{_scheme(registry)}://{registry.server}"


def _credentials(registry: PrivateRegistryParams) -> tuple[str, str] | None:
    if registry.username and registry.password is not None:
        return registry.username, registry.password.get_secret_value()
    return None


def hosts_toml(registry: PrivateRegistryParams, *, with_ca: bool) -> str:
    """containerd's ``hosts.toml`` for ``registry`` (its CA file when ``with_ca``)."""
    url = _url(registry)
    lines = [_HEADER, f'server = "{url}"', "", f'[host."{url}"]']
    lines.append('  capabilities = ["pull", "resolve"]')
    if with_ca:
        lines.append(f'  ca = "{ca_path(registry.server)}"')
    return "\n".join(lines) + "\n"


def hosts_lines(registries: Sequence[PrivateRegistryParams]) -> str:
    """Our ``/etc/hosts`` block (empty when no registry has a ``hosts_string``)."""
    lines = [r.hosts_string for r in registries if r.hosts_string]
    if not lines:
        return ""
    return "\n".join([HOSTS_BEGIN, *lines, HOSTS_END])


def auth_config(registries: Sequence[PrivateRegistryParams]) -> str | None:
    """The kubelet's Docker-config keyring for the registries with credentials, or
    ``None`` when none has any."""
    auths: dict[str, dict[str, str]] = {}
    for registry in registries:
        creds = _credentials(registry)
        if creds is None:
            continue
        token = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        auths[registry.server] = {"auth": token}
    if not auths:
        return None
    return json.dumps({"auths": auths}, indent=2, sort_keys=True) + "\n"


def _curl_quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return escaped.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def curl_config(registry: PrivateRegistryParams) -> str:
    """curl's config (read from stdin with ``-K -``): the URL and, when given, the user."""
    lines = [f'url = "{_curl_quote(_url(registry) + "/v2/")}"']
    creds = _credentials(registry)
    if creds is not None:
        lines.append(f'user = "{_curl_quote(creds[0] + ":" + creds[1])}"')
    return "\n".join(lines) + "\n"


def registry_secrets(registries: Sequence[PrivateRegistryParams]) -> tuple[str, ...]:
    """What to mask in every message about a command that sees the credentials."""
    out: list[str] = []
    for registry in registries:
        creds = _credentials(registry)
        if creds is None or not creds[1]:
            continue
        out += [creds[1], base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()]
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True, slots=True)
class NodeRegistryResult:
    """What :func:`apply_registries` did on one node (no credential in it)."""

    node: str
    changed: tuple[str, ...] = ()
    verified: Mapping[str, str] = field(default_factory=dict)
    containerd_restarted: bool = False
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {
            "changed": list(self.changed),
            "verified": dict(self.verified),
            "containerdRestarted": self.containerd_restarted,
            "notes": list(self.notes),
        }


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


async def _write(
    shell: NodeShell, node: ClusterNode, path: str, content: str, mode: str, *, step: str | None
) -> bool:
    secrets = registry_secrets(shell.params.private_registry_connection_info)
    return await shell.write_file(node, path, content, mode, secrets=secrets, step=step)


async def verify_login(
    shell: NodeShell,
    topo: Topology,
    node: ClusterNode,
    registry: PrivateRegistryParams,
    *,
    with_ca: bool,
    step: str | None = None,
) -> str:
    """``GET /v2/`` of ``registry`` from ``node`` with its credentials, the node's CA file
    and ``/etc/hosts`` (and the cluster's proxy, as containerd has it).

    Returns:
        ``"accepted"`` (200 with credentials) or ``"reachable"`` (no credentials given:
        200 or 401).

    Raises:
        PermanentStepError: the credentials were refused (401/403), TLS or the name
            failed, or another answer; TransientStepError: no answer.
    """
    ca = f" --cacert {shlex.quote(ca_path(registry.server))}" if with_ca else ""
    command = f"curl -sS -o /dev/null -w '%{{http_code}}' --max-time {VERIFY_TIMEOUT}{ca} -K -"
    secrets = (
        *registry_secrets(shell.params.private_registry_connection_info),
        *proxy_secrets(shell.params),
    )
    result = await shell.run(
        node,
        command,
        timeout=VERIFY_TIMEOUT + 15,
        input=curl_config(registry),
        env=environment(shell.params, topo) or None,
        secrets=secrets,
    )
    where = f"the private registry {registry.server} from {node.name}"
    creds = _credentials(registry)
    if not result.ok:
        status = result.exit_status or 0
        reason = result.redacted(_last_line(result.stderr) or f"curl exit {status}")
        message = f"could not reach {where}: {reason}"
        if status in _UNREACHABLE:
            raise TransientStepError(message, step=step)
        raise PermanentStepError(message, step=step)
    code = result.stdout.strip()[-3:]
    if creds is None:
        if code in ("200", "401"):
            return "reachable"
    elif code == "200":
        return "accepted"
    elif code in ("401", "403"):
        raise PermanentStepError(
            f"{where} refused the credentials of user {creds[0]!r} (HTTP {code}): check "
            "private_registry_connection_info's username and password",
            step=step,
        )
    raise PermanentStepError(f"{where} answered HTTP {code or '?'} to GET /v2/", step=step)


async def apply_registries(
    shell: NodeShell,
    topo: Topology,
    node: ClusterNode,
    cas: Mapping[str, bytes],
    *,
    step: str | None = None,
) -> NodeRegistryResult:
    """Configure ``node`` for every registry of the parameters, then verify each login.

    Arguments:
        cas: each server's CA certificate (PEM), read from the VNF package.

    Raises:
        PermanentStepError: a write failed, or a registry refused the login;
        TransientStepError: a registry did not answer; SshError: no connection.
    """
    registries = shell.params.private_registry_connection_info
    changed: list[str] = []
    for registry in registries:
        ca = cas.get(registry.server) if registry.connection_type == "1" else None
        if ca is not None:
            path = ca_path(registry.server)
            if await _write(shell, node, path, ca.decode(), "644", step=step):
                changed.append(path)
        toml = posixpath.join(CERTS_D, registry.server, "hosts.toml")
        content = hosts_toml(registry, with_ca=ca is not None)
        if await _write(shell, node, toml, content, "644", step=step):
            changed.append(toml)
    block = hosts_lines(registries)
    hosts = await shell.run(
        node,
        f"bash -c {shlex.quote(_HOSTS)} hosts {shlex.quote(HOSTS_BEGIN)} {shlex.quote(HOSTS_END)}",
        input=block,
    )
    if _last_line(hosts.check(step=step).stdout) == "changed":
        changed.append("/etc/hosts")
    auth = auth_config(registries)
    if auth is not None and await _write(shell, node, AUTH_CONFIG, auth, "600", step=step):
        changed.append(AUTH_CONFIG)
    notes: list[str] = []
    restarted = False
    conf = await shell.run(
        node, f"bash -c {shlex.quote(_CONFIG_PATH)} config {CONTAINERD_CONFIG} {CERTS_D}"
    )
    outcome = _last_line(conf.check(step=step).stdout)
    if outcome == "changed":
        changed.append(CONTAINERD_CONFIG)
        out = (await shell.run(node, f"sh -c {shlex.quote(_RESTART)}")).check(step=step)
        restarted = _last_line(out.stdout) == "restarted"
        if not restarted:
            notes.append(_last_line(out.stdout))
    elif outcome != "unchanged":
        notes.append(outcome)
    verified: dict[str, str] = {}
    for registry in registries:
        verified[registry.server] = await verify_login(
            shell,
            topo,
            node,
            registry,
            with_ca=registry.connection_type == "1" and registry.server in cas,
            step=step,
        )
    return NodeRegistryResult(node.name, tuple(changed), verified, restarted, tuple(notes))
