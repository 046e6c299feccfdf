"""How many remote commands the cluster steps send: each SSH command costs a session
(and on a node a shell, sudo, often kubectl), so the steps fold what they can into
one command and keep what they learned for the rest of the job run (in memory only:
a resumed job asks again)."""

from __future__ import annotations

import pytest

from handlers.instantiate import InstantiateCluster
from subscriber.errors import CommandFailed
from subscriber.kernel import Services
from tests.cluster_fakes import (
    ACCESS,
    JOIN_DATA,
    Call,
    FakeSsh,
    Reply,
    cluster_vnf,
    join_data_reply,
    k8s_params,
    run_step,
)
from tests.unit.test_cluster_handlers import ctx_for as v2_ctx_for
from tests.unit.test_v1_handlers import CA, TOKEN, ctx_for, run_plan, services

pytestmark = pytest.mark.asyncio

HEAD = ("confirm", "load-params", "discover")
JOIN_TOKEN = "abcdef.0123456789abcdef"
HASH = "a" * 64


def fake_of(svc: Services) -> FakeSsh:
    assert isinstance(svc.ssh, FakeSsh)
    return svc.ssh


async def test_the_bearer_token_is_read_once_a_run_and_again_after_a_resume() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.1.5"], ["10.9.1.6"], api="v1")
    svc = services(tacker, openstack)
    fake_of(svc).on(r"create clusterrolebinding", "created\n")  # no Secret yet
    ctx = ctx_for(inst, occ, svc)
    tail = ("admin-token", "cluster-access", "register-vim", "write-back")
    outcome = await run_plan(InstantiateCluster().plan(ctx.notification), ctx, only=HEAD + tail)
    assert set(outcome.values()) == {"done"}, outcome
    ssh = fake_of(svc)
    # admin-token: one command; cluster-access: one (the CA and the token); the VIM's
    # registration and the write-back send none: the token read is kept for them.
    assert [c.host for c in ssh.calls] == ["10.9.1.5", "10.9.1.5"]
    assert len(ssh.ran("create clusterrolebinding")) == 1
    assert len(ssh.ran(ACCESS)) == 1 and len(ssh.ran("get secret")) == 2
    [(_, access, _)] = tacker.write_backs
    assert access.bearer_token.get_secret_value() == TOKEN
    assert ctx.results["cluster-access"] == {"endpoint": "https://10.9.1.5:6443", "sslCaCert": CA}
    assert TOKEN not in repr(ctx.results)

    # A resumed job (a new plan, the checkpoints before write-back done) reads it again,
    # once, from the main master.
    tacker.write_backs.clear()
    tacker.instances[inst]["vimConnectionInfo"] = []
    resumed_svc = services(tacker, openstack)
    resumed = ctx_for(inst, occ, resumed_svc)
    resumed.results.update(ctx.results)
    outcome = await run_plan(
        InstantiateCluster().plan(resumed.notification), resumed, only=("write-back",)
    )
    assert outcome == {"write-back": "done"}
    again = fake_of(resumed_svc)
    assert [c.command for c in again.calls] == [c.command for c in again.ran("get secret")]
    assert len(again.calls) == 1 and not again.ran(ACCESS)
    [(_, access, _)] = tacker.write_backs
    assert access.bearer_token.get_secret_value() == TOKEN


async def test_join_workers_asks_one_master_once_for_every_member() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.1.5"], ["10.9.1.6", "10.9.1.7"], api="v1")
    ssh = (
        FakeSsh()
        # master5 is ready and sees worker6 (whose install finished): only worker7 joins.
        .on(r"test -f /tmp/installed && .* get nodes -o name", "node/master5\nnode/worker6\n")
        .on(JOIN_DATA, join_data_reply(JOIN_TOKEN, HASH))
        .on(r"install_k8s_cluster\.sh", Reply(stdout=""))
    )
    svc = services(tacker, openstack).merged(Services(ssh=ssh))
    ctx = ctx_for(inst, occ, svc)
    outcome = await run_plan(
        InstantiateCluster().plan(ctx.notification), ctx, only=(*HEAD, "join-workers")
    )
    assert outcome["join-workers"] == "done", outcome
    assert ctx.results["join-workers"] == {"joined": ["worker7"], "members": ["worker6"]}
    survey, installed, data, join = ssh.calls
    assert survey.host == data.host == "10.9.1.5"
    assert (installed.host, installed.command) == ("10.9.1.6", "test -f /tmp/installed")
    assert "token create" in data.command and "openssl x509 -pubkey" in data.command
    assert JOIN_TOKEN not in data.command and JOIN_TOKEN not in join.command
    assert join.host == "10.9.1.7" and join.env["LCCN_JOIN_TOKEN"] == JOIN_TOKEN
    assert not ssh.ran(r"get node worker")  # no probe per node


async def test_label_workers_asks_no_master_when_nova_gives_no_label() -> None:
    tacker, openstack, inst, occ = cluster_vnf(["10.9.1.5"], ["10.9.1.6"], api="v1")
    svc = services(tacker, openstack)
    ctx = ctx_for(inst, occ, svc)
    outcome = await run_plan(
        InstantiateCluster().plan(ctx.notification), ctx, only=(*HEAD, "label-workers")
    )
    assert outcome["label-workers"] == "skipped: no worker to label"
    assert fake_of(svc).calls == []


async def test_ha_joins_use_the_init_reports_join_data_and_a_failed_join_forgets_it() -> None:
    masters, workers = ["10.9.1.21", "10.9.1.22", "10.9.1.23"], ["10.9.1.31", "10.9.1.32"]
    tacker, openstack, inst, occ = cluster_vnf(
        masters, workers, vip="10.9.1.200", params=k8s_params(ha=True)
    )
    key = "c" * 64
    report = f"token:{JOIN_TOKEN}\nserver:https://10.9.1.200:16443\n{CA}ssl_ca_cert_hash:{HASH}\n"
    installed: set[str] = set()

    def install(call: Call) -> Reply:
        installed.add(call.host)
        return Reply(stdout=report + f"certificate_key:{key}\n" if "-p" in call.command else "")

    def survey(call: Call) -> Reply:
        names = [f"node/master{h.rsplit('.', 1)[1]}" for h in masters if h in installed]
        names += [f"node/worker{h.rsplit('.', 1)[1]}" for h in workers if h in installed]
        return Reply(stdout="\n".join(names), exit_status=0 if call.host in installed else 1)

    ssh = (
        FakeSsh()
        .on(r"get node master\d+ -o name", Reply(exit_status=1))  # not a member yet
        .on(r"test -f /tmp/installed && .* get nodes -o name", survey)
        .on(r"install_k8s_cluster\.sh", install)
    )
    svc = services(tacker, openstack).merged(Services(ssh=ssh))
    ctx = v2_ctx_for(inst, occ, svc)
    joins = ("init-master-master21", "join-master-master22", "join-master-master23")
    plan = InstantiateCluster().plan(ctx.notification)
    outcome = await run_plan(plan, ctx, only=(*HEAD, *joins, "join-workers"))
    assert set(outcome.values()) == {"done"}, outcome
    # The init printed the token, hash and certificate key: no master is asked for them.
    assert not ssh.ran(JOIN_DATA) and not ssh.ran("upload-certs")
    runs = ssh.ran(r"install_k8s_cluster\.sh")
    assert sorted(c.host for c in runs) == sorted(masters + workers)
    for call in runs[1:]:
        assert call.env["LCCN_JOIN_TOKEN"] == JOIN_TOKEN and JOIN_TOKEN not in call.command
    assert [c.env["LCCN_CERTIFICATE_KEY"] for c in runs[1:3]] == [key, key]
    # Between the init and the first join, one command on the main master waits for the
    # bootstrap signer's signature of the init's token; only the token's id goes with it.
    [signed] = ssh.ran(r"jws-kubeconfig")
    assert signed.host == "10.9.1.21" and signed.env["TOKEN_ID"] == JOIN_TOKEN.split(".")[0]
    assert JOIN_TOKEN not in signed.command + str(signed.env)
    assert ssh.calls.index(runs[0]) < ssh.calls.index(signed) < ssh.calls.index(runs[1])

    # Within the same run, a join that fails forgets them: its retry asks afresh.
    (step,) = [s for s in plan.steps(ctx.results) if s.name == "join-master-master23"]
    installed.discard("10.9.1.23")
    failing = Reply(exit_status=255, stderr="join failed")
    ssh.on(r"install_k8s_cluster\.sh", failing, host="10.9.1.23")
    with pytest.raises(CommandFailed):
        await run_step(step, ctx)
    ssh.on(r"install_k8s_cluster\.sh", install, host="10.9.1.23")
    ssh.on(JOIN_DATA, join_data_reply("fresh0.0123456789fresh0", HASH, "d" * 64))
    await run_step(step, ctx)
    [asked] = ssh.ran(JOIN_DATA)
    assert asked.host == "10.9.1.21" and asked.env["UPLOAD_CERTS"] == "1"
    last = ssh.ran(r"install_k8s_cluster\.sh")[-1]
    assert last.env["LCCN_JOIN_TOKEN"] == "fresh0.0123456789fresh0"
    assert last.env["LCCN_CERTIFICATE_KEY"] == "d" * 64
