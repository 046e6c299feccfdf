"""The VIM steps name their VNF instance as the VIM's owner, so one instance's ``vim_name``
can neither take over nor delete the VIM another instance registered under that name.

(The client's own check against the real Tacker is in ``test_vim.py``; here the in-memory
Tacker applies the same rule, and the steps run as the runner runs them.)"""

from __future__ import annotations

import pytest

from handlers.job import ClusterJob
from handlers.steps import delete_vim
from subscriber.config import ClusterSettings
from subscriber.errors import VimNotOurs
from subscriber.kernel import Services
from tests.cluster_fakes import cluster_vnf, k8s_params, lcm_op_occ, run_step
from tests.unit.test_cluster_handlers import ctx_for

pytestmark = pytest.mark.asyncio


async def test_one_instances_vim_name_cannot_delete_anothers_vim() -> None:
    params = k8s_params()
    params["k8s_cluster_installation_param"]["vim_name"] = "shared-name"
    tacker, _, victim, _ = cluster_vnf(["10.9.0.15"], [], params=params)
    tacker.register_vims = True  # tacker.register_vim: on
    tacker.vims["shared-name"], tacker.vim_owners["shared-name"] = "vim-1", victim
    # Another instance (another tenant's) names the same VIM in its parameters and
    # terminates.
    attacker = "b1e7c0de-0000-4000-8000-0000000000aa"
    tacker.instances[attacker] = {**tacker.instances[victim], "id": attacker}
    lcm_op_occ(tacker, attacker, "INSTANTIATE", params)
    terminate = lcm_op_occ(tacker, attacker, "TERMINATE")
    ctx = ctx_for(attacker, terminate, Services(tacker=tacker), operation="TERMINATE")
    step = delete_vim(ClusterJob(ClusterSettings(), ctx.notification))
    with pytest.raises(VimNotOurs):
        await run_step(step, ctx)
    assert tacker.vims == {"shared-name": "vim-1"} and tacker.deleted_vims == []

    # The instance that registered it deletes it.
    own = lcm_op_occ(tacker, victim, "TERMINATE")
    ctx = ctx_for(victim, own, Services(tacker=tacker), operation="TERMINATE")
    done = await run_step(delete_vim(ClusterJob(ClusterSettings(), ctx.notification)), ctx)
    assert done == {"vimName": "shared-name", "deleted": ["shared-name"]}
