"""Two allocators that see each other's records: exactly one stands down."""

from __future__ import annotations

import dataclasses
import time

from operators.controllers.base import Runtime
from operators.fencing import NOT_THE_HOLDER, AllocationRecord, AllocatorMark, stands_down
from operators.kube import ApiError
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


def test_records_round_trip_and_malformed_ones_are_ignored() -> None:
    record = AllocationRecord(LAPTOP, 1_700_000_000.5)
    assert AllocationRecord.parse(record.render()) == record
    for bad in (None, "", "[]", "{}", '{"lease": "x", "holder": "y", "term": "z", "at": 1}', "{"):
        assert AllocationRecord.parse(bad) is None


class Elector:
    namespace, name, identity, term = "dralloc-system", "dralloc-operator", "pod-a", 3


def test_a_recent_winning_record_fences_once_and_old_ones_are_history() -> None:
    runtime = Runtime(dataclasses.replace(Settings(), leader_election=False), FakeClient())  # type: ignore[arg-type]
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


def test_the_api_servers_fencing_refusal_stops_the_replica_and_nothing_else_does() -> None:
    """The fencing policy's refusal (another replica holds the Lease) fences this one, once
    per stretch; a 403 of anything else (RBAC, the claim-allocation policy) does not."""
    runtime = Runtime(dataclasses.replace(Settings(), leader_election=False), FakeClient())  # type: ignore[arg-type]
    runtime.elector = Elector()  # type: ignore[assignment]
    rbac = ApiError(403, "Forbidden", "resourceclaims is forbidden: User cannot create")
    assert not runtime.refused_by_fencing(rbac, "ns/p0")
    assert not runtime.refused_by_fencing(ConnectionResetError(), "ns/p0")
    assert runtime.fenced_until == 0.0
    message = f'denied request: creating ResourceClaim ns/c: {NOT_THE_HOLDER} x (held by "b")'
    assert runtime.refused_by_fencing(ApiError(403, "Forbidden", message), "ns/p1")
    assert runtime.fenced_until > time.monotonic()
    assert runtime._fence.is_set()


def test_the_shipped_policy_says_what_the_replica_listens_for() -> None:
    from pathlib import Path

    policy = (Path(__file__).resolve().parents[3] / "manifests" / "base").joinpath(
        "claim-allocation-fencing.yaml"
    )
    assert NOT_THE_HOLDER in policy.read_text()
