"""Two allocators that see each other's records: exactly one stands down."""

from __future__ import annotations

import dataclasses
import time

import pytest

from operators.controllers.runtime import Runtime
from operators.fencing import NOT_THE_HOLDER, AllocationRecord, AllocatorMark, stands_down
from operators.kube import LEASES, ApiError, FailureKind, failure_kind, passing_refusal
from operators.settings import Settings

from ..controllers.fakes import FakeClient

IN_CLUSTER = AllocatorMark("dralloc-system/dralloc-operator", "pod-a", 3)
LAPTOP = AllocatorMark("default/dralloc-operator", "laptop", 0)


def test_of_two_leases_the_first_goes_on_whoever_looks() -> None:
    assert stands_down(IN_CLUSTER, LAPTOP)  # "default/..." sorts before "dralloc-system/..."
    assert not stands_down(LAPTOP, IN_CLUSTER)


def test_within_one_lease_the_later_term_wins() -> None:
    successor = AllocatorMark(IN_CLUSTER.lease, "pod-b", 4)
    assert stands_down(IN_CLUSTER, successor)
    assert not stands_down(successor, IN_CLUSTER)
    assert not stands_down(IN_CLUSTER, IN_CLUSTER)
    same_term = AllocatorMark(IN_CLUSTER.lease, "pod-0", 3)  # cannot happen; still one stops
    assert stands_down(same_term, IN_CLUSTER) != stands_down(IN_CLUSTER, same_term)


def test_a_record_without_a_lease_fences_nobody_and_stops_for_nobody() -> None:
    """An operator without leader election records its allocations (a released gang member
    relies on it) but has no Lease to compare, so neither side stands down on it."""
    solo = AllocatorMark.without_lease("laptop-solo")
    for fenced in (IN_CLUSTER, LAPTOP):
        assert not stands_down(fenced, solo)
        assert not stands_down(solo, fenced)
    assert AllocationRecord.parse(AllocationRecord(solo, 1.0).render()) == AllocationRecord(
        solo, 1.0
    )
    assert solo.describe() == "laptop-solo (no leader election)"


def test_records_round_trip_and_malformed_ones_are_ignored() -> None:
    record = AllocationRecord(LAPTOP, 1_700_000_000.5)
    assert AllocationRecord.parse(record.render()) == record
    for bad in (None, "", "[]", "{}", '{"lease": "x", "holder": "y", "term": "z", "at": 1}', "{"):
        assert AllocationRecord.parse(bad) is None


class Elector:
    namespace, name, identity, term = "dralloc-system", "dralloc-operator", "pod-a", 3


def test_a_recent_winning_record_fences_once_and_old_ones_are_history() -> None:
    runtime = Runtime(dataclasses.replace(Settings(), leader_election=False), FakeClient())
    runtime.elector = Elector()  # type: ignore[assignment]
    assert runtime.mark == IN_CLUSTER
    old = AllocationRecord(LAPTOP, time.time() - 3 * runtime.settings.lease_duration)
    assert not runtime.saw_allocation(old, "ns/p0"), "a record of an allocator long gone"
    losing = AllocationRecord(AllocatorMark("zzz/lease", "x", 9), time.time())
    assert not runtime.saw_allocation(losing, "ns/p1")
    recent = AllocationRecord(LAPTOP, time.time())
    assert runtime.saw_allocation(recent, "ns/p2") is True
    assert runtime.fenced_until > time.monotonic()
    assert runtime.saw_allocation(AllocationRecord(LAPTOP, time.time()), "ns/p3") is False


def fenced_runtime(holder: str | None) -> tuple[Runtime, FakeClient]:
    client = FakeClient()
    runtime = Runtime(dataclasses.replace(Settings(), leader_election=False), client)
    runtime.elector = Elector()  # type: ignore[assignment]
    if holder is not None:
        client.objects[LEASES.path("dralloc-system", "dralloc-operator")] = {
            "metadata": {"name": "dralloc-operator", "namespace": "dralloc-system"},
            "spec": {"holderIdentity": holder},
        }
    return runtime, client


def refusal(holder: str, lease: str = "dralloc-system/dralloc-operator") -> ApiError:
    """The fencing policy's refusal, as its messageExpression words it."""
    return ApiError(
        403,
        "Forbidden",
        f"creating ResourceClaim ns/c: {NOT_THE_HOLDER} {lease} allocates "
        f'(held by "{holder}"; this writer is pod "pod-a")',
    )


async def test_the_api_servers_fencing_refusal_stops_a_replica_that_does_not_hold_the_lease() -> (
    None
):
    """Refused, and the Lease read live is another's (or gone): the replica stops, once per
    stretch. A 403 of anything else (RBAC, the claim-allocation policy) is no fence."""
    for holder in ("pod-b", None):
        runtime, _ = fenced_runtime(holder)
        rbac = ApiError(403, "Forbidden", "resourceclaims is forbidden: User cannot create")
        assert not await runtime.refused_by_fencing(rbac, "ns/p0")
        assert not await runtime.refused_by_fencing(ConnectionResetError(), "ns/p0")
        assert runtime.fenced_until == 0.0
        assert await runtime.refused_by_fencing(refusal("pod-b"), "ns/p1")
        assert runtime.fenced_until > time.monotonic() and runtime._fence.is_set(), holder


async def test_a_replica_leading_another_lease_than_the_fencing_one_stops() -> None:
    """A laptop's operator told another Lease leads it, but the API server fences by the
    configured one: refused, it stops (its own Lease says nothing)."""
    runtime, _ = fenced_runtime("pod-a")  # its own Lease is its own
    assert await runtime.refused_by_fencing(refusal("pod-z", "dralloc-system/other"), "ns/p")
    assert runtime._fence.is_set()


async def test_a_refusal_while_this_replica_holds_the_lease_is_no_fence() -> None:
    """Just after a takeover the API server's parameter cache may still name the old holder:
    the write is retried as an unavailable one, the replica goes on leading."""
    runtime, _ = fenced_runtime("pod-a")
    assert await runtime.refused_by_fencing(refusal("pod-old"), "ns/p1")
    assert not runtime._fence.is_set()
    assert failure_kind(refusal("pod-old")) is FailureKind.REJECTED  # it did not land
    assert passing_refusal(refusal("pod-old"))  # but is retried soon
    # The policy knowing the holder but not this writer: a misnamed identity, said once.
    assert await runtime.refused_by_fencing(refusal("pod-a"), "ns/p2")
    assert runtime._told_misnamed and not runtime._fence.is_set()


def test_the_shipped_policy_says_what_the_replica_listens_for() -> None:
    from pathlib import Path

    policy = (Path(__file__).resolve().parents[3] / "manifests" / "base").joinpath(
        "claim-allocation-fencing.yaml"
    )
    assert NOT_THE_HOLDER in policy.read_text()


def test_a_policy_not_ready_yet_is_a_passing_state() -> None:
    """A Lease about to be made, an API server whose parameter cache is not synced: a refusal
    (nothing landed), retried soon, not five minutes later as one someone must fix."""
    for message in (
        "failed to configure binding: no params found for policy binding with `Deny` "
        "parameterNotFoundAction",
        "failed to configure policy: paramKind coordination.k8s.io/v1, Kind=Lease not yet synced",
    ):
        error = ApiError(403, "Forbidden", message)
        assert failure_kind(error) is FailureKind.REJECTED and passing_refusal(error)
    assert not passing_refusal(ApiError(403, "Forbidden", "rbac says no"))


async def test_refusals_that_go_on_while_holding_the_lease_name_the_stale_parameter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kube-apiserver can be left judging by a frozen Lease (its parameter informer stopped):
    after half a minute of such refusals the log says so, and what to do."""
    from structlog.testing import capture_logs

    from operators.controllers import runtime as runtime_module

    clock = [1000.0]
    monkeypatch.setattr(runtime_module.time, "monotonic", lambda: clock[0])
    runtime, _ = fenced_runtime("pod-a")
    with capture_logs() as logs:
        for _ in range(8):
            assert await runtime.refused_by_fencing(refusal("pod-gone"), "ns/p")
            clock[0] += 5.0
    told = [e for e in logs if "stale" in e["event"]]
    assert len(told) == 1 and "130887" in told[0]["event"], logs
    assert not runtime._fence.is_set()
