"""find_gang with claims that several members share: random gangs keep every per-claim rule."""

from __future__ import annotations

import random

import pytest

from operators.allocator import AllocatorState, NodeInfo
from operators.allocator.gang import GangMember, find_gang
from tests.unit.allocator.test_gang import ANY, cluster, wants


def random_gang_with_shared_claims(
    rng: random.Random,
) -> tuple[AllocatorState, list[GangMember], int]:
    state = cluster(
        **{
            f"node-{n}": [rng.choice(["large", "small"]) for _ in range(rng.randint(0, 4))]
            for n in range(rng.randint(2, 5))
        }
    )
    nodes = [NodeInfo(n) for n in sorted(state.node_names())]
    shared = [wants(f"shared{i}", rng.choice(["large", "small", ANY])) for i in range(2)]
    gang = []
    for i in range(rng.randint(2, 6)):
        claims = [wants(f"own{i}", rng.choice(["small", ANY]))] if rng.random() < 0.5 else []
        claims += rng.sample(shared, rng.randint(0 if claims else 1, 2))
        gang.append(GangMember(f"ns/w{i}", claims, nodes))
    return state, gang, rng.randint(1, len(gang))


@pytest.mark.parametrize("seed", range(80))
def test_random_gangs_with_shared_claims_allocate_each_claim_once(seed: int) -> None:
    state, gang, need = random_gang_with_shared_claims(random.Random(seed))
    result = find_gang(state, gang, need=need)
    assert result == find_gang(state, gang, need=need)  # deterministic
    assert not any(state.is_assumed(c) for m in gang for c in m.claims)  # nothing kept
    if not result.fits:
        assert result.reason
        return
    assert len(result.placed) >= need
    by_claim: dict[str, set[tuple[tuple[str, str, str], ...]]] = {}
    for placed in result.placed:
        for allocation in placed.allocations:
            devices = tuple(d.device_id for d in allocation.devices)
            by_claim.setdefault(allocation.claim, set()).add(devices)
            # Node-local devices: a member is on the node of every device it uses.
            assert {d[1] for d in devices} <= {placed.node}, (placed.member, devices)
    # One allocation per claim, however many members use it ...
    assert all(len(choices) == 1 for choices in by_claim.values()), by_claim
    # ... and no device in two claims.
    used = [d for choices in by_claim.values() for devices in choices for d in devices]
    assert len(used) == len(set(used)), used
