"""lccn-subscriber's drain hook: Tacker v2's ``scale_start`` / ``heal_start`` script.

Tacker runs it in its conductor (``python lccn_hook.py``) with a pickled dict on
stdin (``operation``, ``request``, ``vnf_instance``, ``grant_request`` ...) right
before it deletes VMs, and fails the operation when it exits non-zero. It asks
lccn-subscriber to drain the Kubernetes nodes on the servers Tacker's grant request
removes (``removeResources`` of type COMPUTE: Tacker's own choice) and waits,
bounded, for the answer. Nothing goes to stdout (Tacker unpickles it).

Configuration, in the conductor's environment (never in the package):

- ``LCCN_HOOK_CONFIG``: a JSON file (default ``/etc/tacker/lccn_hook.json``) with
  ``url`` (``https://lccn.example:8765/lccn/hooks/drain``), ``token_file`` (a file
  holding ``hooks.token``, readable by the conductor only) or ``token``, and
  optionally ``timeout`` (seconds, default 900), ``poll_interval`` (default 2)
  and ``cafile``;
- or ``LCCN_HOOK_URL``, ``LCCN_HOOK_TOKEN_FILE``, ``LCCN_HOOK_TIMEOUT``,
  ``LCCN_HOOK_CAFILE``, which win over the file.

With neither, the script does nothing (exit 0, one warning on stderr): the nodes
are then removed without a drain, and lccn-subscriber converges at COMPLETED.
Nothing to drain (SCALE_OUT, a whole-VNF heal) also exits 0 at once.

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
    if operation not in ("scale_start", "heal_start"):
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


def call(conf, method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
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


def drain(conf, data, servers):
    grant = data.get("grant_request") or {}
    op_occ = grant.get("vnfLcmOpOccId")
    body = {
        "vnfInstanceId": grant.get("vnfInstanceId") or (data.get("vnf_instance") or {}).get("id"),
        "vnfLcmOpOccId": op_occ,
        "operation": "SCALE" if data["operation"] == "scale_start" else "HEAL",
        "servers": servers,
    }
    timeout = float(conf.get("timeout") or 900)
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
                status, answer = call(conf, "GET", f"{url}/{op_occ}")
        except (OSError, ValueError) as exc:  # down or restarting: keep asking until the deadline
            status, answer = 0, {"detail": str(getattr(exc, "reason", exc))}
        if status in (401, 403):
            raise HookError(f"lccn-subscriber refused the hook's token (HTTP {status})")
        if status == 400:
            raise HookError(f"lccn-subscriber refused the request: {answer.get('detail')}")
        if status == 404 and posted:
            posted = False  # the request was lost (store replaced?): post it again
        state = answer.get("status") if status in (200, 202) else None
        if state == "done":
            print(
                f"lccn hook: drained {', '.join(answer.get('nodes') or []) or 'nothing'}",
                file=sys.stderr,
            )
            return
        if state == "failed":
            raise HookError(f"drain failed: {answer.get('detail') or 'see lccn-subscriber'}")
        last = state or f"HTTP {status} {answer.get('detail') or ''}".strip()
        time.sleep(interval)
    raise HookError(f"no drain answer within {timeout:.0f} s (last: {last})")


def main():
    data = pickle.load(sys.stdin.buffer)
    servers = leaving_servers(data)
    if not servers:
        return 0
    try:
        conf = load_config()
        if conf is None:
            print(
                "lccn hook: not configured (LCCN_HOOK_CONFIG or LCCN_HOOK_URL): "
                "nodes are removed without a drain",
                file=sys.stderr,
            )
            return 0
        drain(conf, data, servers)
    except HookError as exc:
        print(f"lccn hook: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
