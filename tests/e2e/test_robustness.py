"""The robustness suite's short seeded run, in each API mode: traffic with random faults
(operator SIGKILL, API server restarts, etcd compaction with a relist), pods gated by the
shipped webhook configuration (claims pods fail closed: refused while no operator serves,
never created ungated), the shipped claim-allocation policy (kube-scheduler may not allocate
the claims it deallocates), operators fenced by the shipped fencing policy (each with a token
bound to a pod of its own, as replicas are), preemption for devices on (pods of a high
priority come), and the whole recorded history checked by ``robustness.checker`` (no device held by two claims at any
revision, bound pods have their devices, gangs whole, quotas kept, every pod bound or
explained at the end).

Its summary (seed, faults fired, violations, figures) is printed as ``[robustness]`` lines
(``-rP``). The long run is ``python -m robustness`` (docs/development.md "Robustness: `make robustness`").
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from robustness.cluster import MODES, Cluster
from robustness.run import SAFE_FAULTS, Options, Run

from .kube_helpers import Testbed, wait_for
from .reliability_helpers import scheduler_healthy, stopped

pytestmark = [pytest.mark.api_modes, pytest.mark.timeout(900)]

SEED = int(os.environ.get("DRALLOC_ROBUSTNESS_SEED", "1"))
RELISTS = 20


def fresh_scheduler(testbed: Testbed) -> None:
    """kube-scheduler started anew, as a run's control plane starts: the shared testbed's
    kube-scheduler may come from an earlier run's API server restarts with its watches in
    backoff (kube-apiserver answers "forbidden" while its RBAC cache fills after a restart,
    and client-go doubles its wait each time), binding nothing for up to a minute."""
    with stopped(testbed, "kube-scheduler"):
        pass
    wait_for("kube-scheduler healthy", lambda: scheduler_healthy(testbed), timeout=60)


def test_a_short_seeded_run_with_faults_keeps_every_rule(testbed: Testbed, tmp_path: Path) -> None:
    if testbed.state_dir is None:
        pytest.skip("faults restart the control plane: needs a testbed started by this run")
    fresh_scheduler(testbed)
    cluster = Cluster(
        testbed.kubeconfig, testbed.bin, testbed.state_dir, MODES[testbed.api_mode.name]
    )
    # settle_s: a pod kube-scheduler put aside while its view was stale (after a relist) is
    # retried at the latest when its unschedulable queue is flushed, every 5 minutes.
    options = Options(
        mode=cluster.mode, seed=SEED, duration_s=50, faults=SAFE_FAULTS, fault_count=4,
        settle_s=330, gate="webhook-closed", fencing=True, policy=True, preemption=True,
    )  # fmt: skip
    result = asyncio.run(Run(cluster, options, tmp_path).execute())
    print("[robustness] " + result.summary().replace("\n", "\n[robustness] "))
    # The run did what it claims: traffic, the faults, pods bound, a relist seen by someone.
    assert sum(result.traffic.values()) >= 50, result.traffic
    assert result.traffic["priority_pod"] >= 1, result.traffic
    assert len(result.fired) == 4, result.fired
    assert result.pods_bound >= 20, result.summary()
    assert result.settled_in_s is not None, result.summary()
    assert result.created_ungated == [], "the shipped webhook fails closed for claims pods"
    assert result.stand_downs.get("records") == 0, "an operator stood down for another's records"
    assert result.ok, result.summary()


@pytest.mark.only_api_modes(
    "in-tree",
    reason="the relist double was found in-tree; CRD mode relists in the short run and "
    "tests/e2e/test_faults.py (about 5 minutes a mode)",
)
def test_twenty_relists_keep_every_rule(testbed: Testbed, tmp_path: Path) -> None:
    """The relist that once left a device with two claims (a watch expired across an API
    server restart, then a relist), twenty times in one run: etcd compacted and
    kube-apiserver restarted while traffic and allocations are in flight (each restart also
    costs the operator its Lease, so it leads again on a relisted cache). The history is
    checked at every revision, not only at the end."""
    if testbed.state_dir is None:
        pytest.skip("faults restart the control plane: needs a testbed started by this run")
    fresh_scheduler(testbed)
    cluster = Cluster(
        testbed.kubeconfig, testbed.bin, testbed.state_dir, MODES[testbed.api_mode.name]
    )
    options = Options(
        mode=cluster.mode, seed=SEED + 100, duration_s=280, rate=6.0,
        faults=("compact-and-restart",), fault_count=RELISTS, settle_s=330,
        gate="webhook-closed", fencing=True, policy=True,
    )  # fmt: skip
    result = asyncio.run(Run(cluster, options, tmp_path).execute())
    print("[robustness] " + result.summary().replace("\n", "\n[robustness] "))
    assert len(result.fired) == RELISTS, result.fired
    # Each fault cost the operators' caches their watches: at least one relist for each.
    assert result.operator_relists >= RELISTS, result.summary()
    assert result.pods_bound >= 40, result.summary()
    assert result.settled_in_s is not None, result.summary()
    assert result.ok, result.summary()
