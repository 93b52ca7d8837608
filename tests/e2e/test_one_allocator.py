"""One allocator: every way of running the operator meets at one Lease (issue 13).

The realistic case of two active allocators was the in-cluster Deployment ($POD_NAMESPACE set
to its namespace) plus `kopf run` from a laptop (no $POD_NAMESPACE, so "default"): two Leases,
two leaders. Now the Lease is dralloc-system/dralloc-operator by default whatever the
environment, and an operator that cannot use its Lease stops at once with one line saying
which namespace and which permissions it needs.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from .kube_helpers import Testbed, unique_name, wait_for
from .operator_fixtures import GATE, LEASE_NAMESPACE, OperatorProcess, install_crds

pytestmark = pytest.mark.api_modes

LEADING = "controllers starting"
LEASE_DURATION_S = 8.0  # OperatorProcess's --lease-duration


def _lease(testbed: Testbed) -> dict[str, Any]:
    lease = testbed.get("lease", "dralloc-operator", f"--namespace={LEASE_NAMESPACE}")
    assert lease is not None
    spec: dict[str, Any] = lease["spec"]
    return spec


def _seconds(micro_time: str) -> float:
    return datetime.datetime.fromisoformat(micro_time.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def two_namespaces(testbed: Testbed) -> list[str]:
    names = [unique_name("home-a"), unique_name("home-b")]
    for name in names:
        testbed.kubectl("create", "namespace", name)
    return names


def test_two_operators_with_default_lease_settings_elect_one_leader(
    testbed: Testbed, tmp_path: Path, two_namespaces: list[str]
) -> None:
    install_crds(testbed)
    operators = [
        OperatorProcess(
            testbed,
            tmp_path / f"{home}.log",
            lease="",
            webhook=False,
            identity=home,
            env={"POD_NAMESPACE": home},
        )
        for home in two_namespaces
    ]
    try:
        for proc in operators:
            proc.start()
        wait_for("a leader", lambda: any(LEADING in p.log() for p in operators), timeout=60)
        (leader,) = [p for p in operators if LEADING in p.log()]
        (standby,) = [p for p in operators if p is not leader]
        standby.wait_until("waiting for leadership")  # it tried the same Lease
        first = _lease(testbed)
        assert first["holderIdentity"] == leader.identity

        def renewed_past_a_lease_duration() -> dict[str, Any] | None:
            now = _lease(testbed)
            if _seconds(now["renewTime"]) - _seconds(first["renewTime"]) > LEASE_DURATION_S:
                return now
            return None

        # Polled on the Lease: for longer than a lease duration the standby could have taken
        # it (or made one of its own) had it not been waiting on this one.
        later = wait_for("the leader renewing past a lease duration",
                         renewed_past_a_lease_duration, timeout=60)  # fmt: skip
        assert later["holderIdentity"] == leader.identity
        assert later.get("leaseTransitions", 0) == first.get("leaseTransitions", 0)
        assert LEADING not in standby.log()
        for home in two_namespaces:
            assert testbed.get("lease", "dralloc-operator", f"--namespace={home}") is None
    finally:
        for proc in operators:
            proc.stop()


def test_an_operator_that_cannot_use_its_lease_stops_with_one_line(
    testbed: Testbed, tmp_path: Path
) -> None:
    install_crds(testbed)
    missing = unique_name("no-such-namespace")
    proc = OperatorProcess(
        testbed, tmp_path / "operator.log", lease="", webhook=False,
        extra=[f"--lease-namespace={missing}"],
    )  # fmt: skip
    proc.start()
    try:
        assert proc.process is not None
        code = proc.process.wait(timeout=60)
    except Exception:
        proc.stop()
        raise AssertionError(f"the operator kept running:\n{proc.log()[-2000:]}") from None
    assert code != 0
    lines = [line for line in proc.log().splitlines() if line.startswith("dralloc: ")]
    assert len(lines) == 1, proc.log()[-3000:]
    assert lines[0] == (
        f"dralloc: cannot use the leader-election Lease {missing}/dralloc-operator: "
        f'namespace "{missing}" does not exist; the operator\'s identity needs get, create and '
        f"update on leases.coordination.k8s.io in namespace {missing} "
        "(manifests/base/role-leases.yaml), or set --lease-namespace "
        "(DRALLOC_LEASE_NAMESPACE)"
    ), lines[0]


def test_two_operators_told_different_leases_do_not_both_allocate(
    testbed: Testbed, tmp_path: Path, two_namespaces: list[str], namespace: str
) -> None:
    """The second line: each allocation records its allocator, and an operator that sees a
    recent one from an allocator that wins (here: whose Lease sorts first) stops allocating
    and says so. 0 devices end up allocated twice."""
    from .operator_fixtures import allocated_devices, make_pool, pod, template, wait_bound

    install_crds(testbed)
    first, second = sorted(two_namespaces)  # the first Lease wins
    operators = {
        home: OperatorProcess(
            testbed, tmp_path / f"{home}.log", lease="", webhook=False, identity=home,
            extra=[f"--lease-namespace={home}"],
        )
        for home in (first, second)
    }  # fmt: skip
    pool = make_pool(testbed, nodes=2, devices=12)
    testbed.apply(template(namespace, "one", pool))
    entry = [{"name": "dev", "resourceClaimTemplateName": "one"}]
    gate: dict[str, Any] = {"schedulingGates": [{"name": GATE}]}  # no webhook
    try:
        operators[first].start()
        operators[first].wait_until(LEADING)
        testbed.apply(*[pod(namespace, f"early-{i}", pool, entry, **gate) for i in range(4)])
        for i in range(4):
            wait_bound(testbed, namespace, f"early-{i}")
        operators[second].start()  # leads its own Lease, sees the records, stops
        wait_for(
            "the second operator standing down",
            lambda: "another allocator is acting" in operators[second].log(),
            timeout=60,
        )
        testbed.apply(*[pod(namespace, f"late-{i}", pool, entry, **gate) for i in range(16)])
        for i in range(16):
            wait_bound(testbed, namespace, f"late-{i}", timeout=90)
        devices = allocated_devices(testbed, namespace)
        assert len(devices) == 20, devices
        assert len(set(devices)) == 20, "a device was allocated twice"
        found = testbed.get(
            "events", f"--namespace={namespace}", "--field-selector=reason=AnotherAllocator"
        )
        assert (found or {}).get("items"), "the standing-down operator did not say why"
        assert "another allocator is acting" not in operators[first].log()
        assert "pod allocated" not in operators[second].log(), "the second operator allocated"
    finally:
        for proc in operators.values():
            proc.stop()
