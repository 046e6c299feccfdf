"""lccn-subscriber's hook: Tacker v2's management-driver script for every point of an operation.

Tacker runs it in its conductor (``python lccn_hook.py``) inside the operation, with a
pickled dict on stdin (``operation`` is the point: ``instantiate_end``, ``scale_start``
...; ``request``, ``vnf_instance``, ``grant_request`` ...), and waits for it. It asks
lccn-subscriber to run the operation's cluster job for that point and waits, bounded,
for the answer:

- ``scale_start`` / ``heal_start``: drain the Kubernetes nodes on the servers Tacker's
  grant request removes (``removeResources`` of type COMPUTE: Tacker's own choice)
  before Tacker deletes their VMs; nothing to remove (SCALE_OUT, a whole-VNF heal):
  exit 0 at once;
- ``instantiate_end``, ``scale_end``, ``heal_end``: build or converge the cluster; when
  the job hands back our ``vimConnectionInfo`` entry (INSTANTIATE, a whole-VNF heal),
  the script prints the instance with it, pickled, on stdout, and Tacker keeps it with
  the operation (no MODIFY_INFO);
- ``terminate_start``: forget the cluster (VIM, inventory) while the VMs still run;
- ``instantiate_rollback_start``, ``scale_rollback_start``: undo what the job did on the
  nodes before Tacker deletes them.

A job that fails makes the script exit 1 with one line on stderr (the job's reason, no
secret): Tacker fails the op-occ to FAILED_TEMP with that line in its ``error``, and
``retry`` asks again (the job resumes from its checkpoints), ``rollback`` runs the
``*_rollback_start`` point.

Configuration, in the conductor's environment (never in the package):

- ``LCCN_HOOK_CONFIG``: a JSON file (default ``/etc/tacker/lccn_hook.json``) with
  ``url`` (``https://lccn.example:8765/lccn/hooks``), ``token_file`` (a file holding
  ``hooks.token``, readable by the conductor only) or ``token``, and optionally
  ``timeout`` (seconds, default 3600), ``poll_interval`` (default 2) and ``cafile``;
- or ``LCCN_HOOK_URL``, ``LCCN_HOOK_TOKEN_FILE``, ``LCCN_HOOK_TIMEOUT``,
  ``LCCN_HOOK_CAFILE``, which win over the file.

With neither, the script does nothing (exit 0, one warning on stderr): lccn-subscriber
then acts on the operation's COMPLETED notification, as without the hook.

Python standard library only: it runs with the conductor's interpreter.
"""

import json
import os
import pickle
import ssl
import sys
import time
import urllib.error
import urllib.request

DEFAULT_CONFIG = "/etc/tacker/lccn_hook.json"
POINTS = (
    "instantiate_end",
    "scale_start",
    "scale_end",
    "heal_start",
    "heal_end",
    "terminate_start",
    "instantiate_rollback_start",
    "scale_rollback_start",
)
DRAIN_POINTS = ("scale_start", "heal_start")
# What of the instance lccn-subscriber is sent: never accessInfo (Tacker passes the VIM's
# password in it), nor what the cluster job does not read.
INSTANCE_FIELDS = (
    "id",
    "vnfInstanceName",
    "vnfdId",
    "vnfProvider",
    "vnfProductName",
    "vnfSoftwareVersion",
    "vnfdVersion",
    "instantiationState",
    "instantiatedVnfInfo",
)
VIM_FIELDS = ("vimId", "vimType", "interfaceInfo")
DETAIL_MAX = 400


class HookError(Exception):
    pass


def load_config():
    path = os.environ.get("LCCN_HOOK_CONFIG", DEFAULT_CONFIG)
    conf = {}
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as f:
                conf = json.load(f)
        except (OSError, ValueError) as exc:
            raise HookError(f"cannot read {path}: {exc}") from None
    for key in ("url", "token_file", "timeout", "cafile"):
        value = os.environ.get(f"LCCN_HOOK_{key.upper()}")
        if value:
            conf[key] = value
    if not conf.get("url"):
        return None
    token = conf.get("token") or ""
    if not token and conf.get("token_file"):
        try:
            with open(conf["token_file"], encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise HookError(f"cannot read the token file: {exc.strerror}") from None
    if not token:
        raise HookError("no token: set token_file (or token) in the hook's configuration")
    conf["token"] = token
    return conf


def leaving_servers(data):
    """The Nova server ids Tacker removes, or [] when there is nothing to drain."""
    operation = data.get("operation")
    request = data.get("request") or {}
    if operation == "scale_start" and request.get("type") != "SCALE_IN":
        return []
    if operation not in DRAIN_POINTS:
        return []
    grant = data.get("grant_request") or {}
    servers = [
        res["resource"]["resourceId"]
        for res in grant.get("removeResources") or []
        if res.get("type") == "COMPUTE" and (res.get("resource") or {}).get("resourceId")
    ]
    vnfcs = ((data.get("vnf_instance") or {}).get("instantiatedVnfInfo") or {}).get(
        "vnfcResourceInfo"
    ) or []
    every = {(v.get("computeResource") or {}).get("resourceId") for v in vnfcs}
    if every and every <= set(servers):
        return []  # the whole VNF is rebuilt: no node stays to drain through
    return servers


def instance_view(instance):
    """The instance as lccn-subscriber may see it: no credentials."""
    view = {k: instance[k] for k in INSTANCE_FIELDS if k in instance}
    vims = instance.get("vimConnectionInfo") or {}
    view["vimConnectionInfo"] = {
        key: {k: entry[k] for k in VIM_FIELDS if k in entry}
        for key, entry in vims.items()
        if isinstance(entry, dict)
    }
    return view


def one_line(text):
    line = " ".join(str(text).split())
    return line if len(line) <= DETAIL_MAX else line[: DETAIL_MAX - 3] + "..."


def call(conf, method, url, body=None):
    data = json.dumps(body, default=str).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Authorization", "Bearer " + conf["token"])
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    context = (
        ssl.create_default_context(cafile=conf.get("cafile")) if url.startswith("https") else None
    )
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail", "")
        except ValueError:
            detail = ""
        return exc.code, {"detail": detail}


def ask(conf, data, point, servers):
    """Post the request, then poll until lccn-subscriber answers done or failed."""
    grant = data.get("grant_request") or {}
    instance = data.get("vnf_instance") or {}
    op_occ = grant.get("vnfLcmOpOccId")
    if not op_occ:
        raise HookError(f"{point}: Tacker passed no grant request, so no op-occ id")
    body = {
        "point": point,
        "vnfInstanceId": grant.get("vnfInstanceId") or instance.get("id"),
        "vnfLcmOpOccId": op_occ,
        "vnfInstance": instance_view(instance),
    }
    if servers:
        body["servers"] = servers
    timeout = float(conf.get("timeout") or 3600)
    interval = float(conf.get("poll_interval") or 2)
    deadline = time.monotonic() + timeout
    url = conf["url"].rstrip("/")
    posted = False
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            if not posted:
                status, answer = call(conf, "POST", url, body)
                posted = status == 202
            else:
                status, answer = call(conf, "GET", f"{url}/{op_occ}/{point}")
        except (OSError, ValueError) as exc:  # down or restarting: keep asking until the deadline
            status, answer = 0, {"detail": str(getattr(exc, "reason", exc))}
        if status in (401, 403):
            raise HookError(f"lccn-subscriber refused the hook's token (HTTP {status})")
        if status in (400, 413):
            raise HookError(f"lccn-subscriber refused the request: {answer.get('detail')}")
        if status == 404 and posted:
            posted = False  # the request was lost (store replaced?): post it again
        state = answer.get("status") if status in (200, 202) else None
        if state == "done":
            return answer
        if state == "failed":
            raise HookError(answer.get("detail") or "failed: see lccn-subscriber events")
        last = state or f"HTTP {status} {answer.get('detail') or ''}".strip()
        if state == "running" and answer.get("detail"):
            last = f"retrying after: {answer['detail']}"
        time.sleep(interval)
    raise HookError(f"no answer within {timeout:.0f} s (last: {last})")


def with_vim(instance, vim_connection_info):
    """The instance Tacker passed, with our vimConnectionInfo entry in (after its own)."""
    out = dict(instance)
    vims = dict(out.get("vimConnectionInfo") or {})
    vims.update(vim_connection_info)
    out["vimConnectionInfo"] = vims
    return out


def main():
    data = pickle.load(sys.stdin.buffer)
    point = data.get("operation")
    if point not in POINTS:
        return 0
    servers = []
    if point in DRAIN_POINTS:
        servers = leaving_servers(data)
        if not servers:
            return 0
    try:
        conf = load_config()
        if conf is None:
            sys.stderr.write(
                "lccn hook: not configured (LCCN_HOOK_CONFIG or LCCN_HOOK_URL): "
                "lccn-subscriber acts on the notifications alone\n"
            )
            return 0
        answer = ask(conf, data, point, servers)
    except HookError as exc:
        # Tacker puts stderr in the op-occ's error: one line, nothing else on it.
        sys.stderr.write(one_line(f"lccn-subscriber: {exc}"))
        return 1
    vims = answer.get("vimConnectionInfo")
    if vims:
        out = {"vnf_instance": with_vim(data.get("vnf_instance") or {}, vims)}
        sys.stdout.buffer.write(pickle.dumps(out))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
