"""The wait for the bootstrap signer's signature, run by bash against a kubectl stand-in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from handlers.toolkit import kubeadm


def _run(tmp_path: Path, kubectl_body: str, tries: int = 80) -> tuple[int, list[str]]:
    """Run ``await_signed abcdef`` with a kubectl that logs its argv and runs ``kubectl_body``
    (``$n``: how many times it ran before); its exit status and the logged argvs."""
    kubectl = tmp_path / "kubectl"
    log = tmp_path / "argv"
    count = tmp_path / "count"
    count.write_text("0")
    kubectl.write_text(
        "#!/bin/bash\n"
        f'echo "$*" >> {log}\n'
        f"n=$(cat {count}); echo $((n + 1)) > {count}\n"
        f"{kubectl_body}\n"
    )
    kubectl.chmod(0o755)
    script = kubeadm._AWAIT_SIGNED + 'await_signed "$TOKEN_ID"\n'
    env = {
        **os.environ,
        "KUBECTL": str(kubectl),
        "TOKEN_ID": "abcdef",
        "SIGNED_TRIES": str(tries),
    }
    done = subprocess.run(["bash", "-c", script], env=env, timeout=60, check=False)
    return done.returncode, log.read_text().splitlines()


def test_it_polls_until_the_tokens_signature_is_there(tmp_path: Path) -> None:
    status, argvs = _run(tmp_path, 'if [ "$n" -ge 2 ]; then printf eyJhbGciOi..sig; fi')
    assert status == 0 and len(argvs) == 3
    assert "-n kube-public get configmap cluster-info" in argvs[0]
    assert "jsonpath={.data.jws-kubeconfig-abcdef}" in argvs[0]


def test_a_kubectl_that_cannot_read_the_configmap_ends_the_wait_at_once(tmp_path: Path) -> None:
    status, argvs = _run(tmp_path, 'echo "NotFound" >&2; exit 1')
    assert status == 1 and len(argvs) == 1


def test_no_signature_within_the_tries_ends_the_wait(tmp_path: Path) -> None:
    status, argvs = _run(tmp_path, "true", tries=3)
    assert status == 1 and len(argvs) == 3
