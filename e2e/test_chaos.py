"""The short fault campaign inside ``make test``: every fault of e2e/chaos once, on a small burst,
judged by the independent checker (``make chaos`` runs the full campaign: more jobs, several
seeds). Needs the local cluster: the faults restart its API server and compact its etcd.

``CHAOS_SEED`` picks the seed (default 1), to replay a failure seen elsewhere."""

from __future__ import annotations

import os

import pytest

from e2e.chaos.scenarios import FAULTS, Campaign
from e2e.controller import ControllerIdentity
from e2e.support import ClusterHandle, Kubectl

pytestmark = pytest.mark.e2e

JOBS = 30


@pytest.mark.parametrize("fault", FAULTS)
async def test_no_violation_under(
    fault: str, cluster: ClusterHandle, kubectl: Kubectl, controller_identity: ControllerIdentity
) -> None:
    if cluster.local is None:
        pytest.skip("faults need the local cluster (they restart its API server)")
    campaign = Campaign(cluster.local, kubectl, controller_identity,
                        cluster.logs_dir / "chaos", bound_s=180)
    seed = int(os.environ.get("CHAOS_SEED", "1"))
    result = await campaign.run(fault, seed, JOBS)
    print(f"{fault} seed {seed}: {result}")
    assert not result.violations, "\n".join(result.violations)
    assert result.finished + len(result.notes.get("actions", {})) > 0
    if fault != "none":
        assert result.faults > 0, "the scenario injected no fault"
    if fault == "watch-410":
        assert result.notes["controller_relists"] > 0, "no watch had to relist after compaction"
