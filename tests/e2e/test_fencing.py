"""Fencing by the API server (manifests/base/claim-allocation-fencing.yaml), on a real one.

Two operators run with pod-bound tokens of one ServiceAccount, as two replicas of the
Deployment do (the API server puts each pod's name in its requests' userInfo.extra). Each is
told a Lease of its own, so both lead: a laptop's ``kopf run`` next to the in-cluster one.
The policy, as shipped, is bound to the first one's Lease. The second one's Lease sorts
first, so dralloc's own second line (allocation records: the allocator whose Lease sorts
first goes on) would keep *it* going and stop the first: only the API server stands between
them. It refuses the second one every claim and every allocation; every claim is made and
allocated by the first, one per pod, and no device is held twice at any recorded revision;
told so by the API server, the second stops allocating.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from robustness.cluster import MODES, Cluster
from robustness.fencing import Replicas

from .history_helpers import judged, recording
from .kube_helpers import Testbed, unique_name
from .operator_fixtures import (
    GATE,
    LEASE_NAMESPACE,
    OperatorProcess,
    claims_in,
    ensure_lease_namespace,
    install_crds,
    make_pool,
    pod,
    template,
    wait_bound,
)

pytestmark = [pytest.mark.api_modes, pytest.mark.timeout(300)]

REFUSED = "only the dralloc operator that holds the Lease"
PODS = 10


def test_of_two_leading_operators_only_the_lease_holder_makes_and_allocates_claims(
    testbed: Testbed, tmp_path: Path, namespace: str
) -> None:
    install_crds(testbed)
    ensure_lease_namespace(testbed)
    run = unique_name("fence")
    configured, other = f"z-{run}", f"a-{run}"  # the other's Lease sorts first
    cluster = Cluster(testbed.kubeconfig, testbed.bin, None, MODES[testbed.api_mode.name])
    # Pods of the ServiceAccount (they never run) and tokens bound to them; the shipped
    # policy for that ServiceAccount, bound to the configured Lease and this namespace (it
    # stays afterwards: robustness.fencing says why).
    replicas = Replicas(cluster, run, (LEASE_NAMESPACE, configured), [namespace], tmp_path)
    operators: dict[str, OperatorProcess] = {}
    try:
        replicas.install()
        keys = {role: replicas.credentials(f"op-{role}") for role in ("holder", "other")}
        # The holder is given no identity: by default it is the name the policy knows it by,
        # its pod's, from the API server's review of its token.
        operators = {
            role: OperatorProcess(
                testbed, tmp_path / f"{role}.log", lease=lease, webhook=False,
                identity="" if role == "holder" else f"op-{role}", kubeconfig=keys[role],
            )
            for role, lease in (("holder", configured), ("other", other))
        }  # fmt: skip
        pool = make_pool(testbed, nodes=2, devices=PODS)
        testbed.apply(template(namespace, "one", pool))
        entry = [{"name": "dev", "resourceClaimTemplateName": "one"}]
        gate: dict[str, Any] = {"schedulingGates": [{"name": GATE}]}
        replicas.wait_in_force(keys["other"], namespace)
        with recording(testbed, [namespace], f"{namespace}-marks") as recorder:
            for proc in operators.values():
                proc.start()
            for proc in operators.values():
                proc.wait_until("controllers starting")
            testbed.apply(*[pod(namespace, f"p-{i}", pool, entry, **gate) for i in range(PODS)])
            for i in range(PODS):
                wait_bound(testbed, namespace, f"p-{i}", timeout=120)
            report = judged(recorder.history())
        assert report.ok, [str(v) for v in report.violations]
        held = testbed.get("lease", configured, f"--namespace={LEASE_NAMESPACE}") or {}
        assert held["spec"]["holderIdentity"] == "op-holder", held
        owners = [
            ref["uid"]
            for c in claims_in(testbed, namespace)
            for ref in c["metadata"].get("ownerReferences") or []
        ]
        assert len(owners) == PODS == len(set(owners)), "a pod got a second claim"
        other_log = operators["other"].log()
        assert REFUSED in other_log, other_log[-3000:]
        # Told by the API server, it stopped (it never saw a record of the holder's winning).
        assert "the API server refuses this replica's claims and allocations" in other_log
        assert "pod allocated" not in other_log
        assert "another allocator is acting" not in operators["holder"].log()
    finally:
        for proc in operators.values():
            proc.stop()
        replicas.remove()
