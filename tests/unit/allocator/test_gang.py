"""find_gang: joint placement of a gang's members, all or nothing, deterministic, bounded."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from operators.allocator import AllocatorState, NodeInfo
from operators.allocator.gang import GangMember, GangPlacement, find_gang
from tests.unit.allocator.test_pin import gpu
from tests.unit.allocator.test_placement import claim_of, device, model_class, node_slice

ANY = "any-gpu"


def cluster(**nodes: list[str]) -> AllocatorState:
    """node name -> device models; classes "large", "small" and "any-gpu"."""
    state = AllocatorState()
    for node, models in nodes.items():
        devices = [device(f"d{i}", model) for i, model in enumerate(models)]
        state.upsert_slice(node_slice(node, devices))
    state.upsert_class(model_class("large"))
    state.upsert_class(model_class("small"))
    state.upsert_class({"metadata": {"name": ANY}, "spec": {}})
    return state


def wants(name: str, cls: str, count: int = 1) -> dict[str, Any]:
    return claim_of(name, {"name": "gpu", "exactly": {"deviceClassName": cls, "count": count}})


def members(state: AllocatorState, *specs: tuple[str, str, int]) -> list[GangMember]:
    nodes = [NodeInfo(n) for n in sorted(state.node_names())]
    return [GangMember(f"ns/{name}", [wants(name, cls, n)], nodes) for name, cls, n in specs]


def one_by_one(state: AllocatorState, gang: list[GangMember], policy: str) -> int:
    """Per-pod placement as in-tree DRA does it: each member on its own, devices kept."""
    placed = 0
    for member in gang:
        found = state.find_node(member.claims, member.nodes, policy, explain=False)
        if found.node is not None:
            placed += 1
            for claim, allocation in zip(member.claims, found.allocations, strict=True):
                state.assume(claim, allocation)
    for member in gang:
        for claim in member.claims:
            state.release(claim)
    return placed


def used_devices(result: GangPlacement) -> list[tuple[str, str, str]]:
    return [d.device_id for p in result.placed for a in p.allocations for d in a.devices]


@pytest.mark.parametrize(
    ("policy", "big", "small"), [("binpack", "node-a", "node-b"), ("first-fit", "node-b", "node-a")]
)
def test_a_joint_placement_is_found_where_member_by_member_half_places(
    policy: str, big: str, small: str
) -> None:
    # A node with 3 GPUs and one with 2: the 1-GPU member first takes the small node
    # (binpack: fewest left) or node-a (first-fit: listed first), and one of the 2-GPU
    # members then fits nowhere. Together: 1+2 on the big node, 2 on the small one.
    state = cluster(**{big: ["small"] * 3, small: ["small"] * 2})
    gang = members(state, ("w0", "small", 1), ("w1", "small", 2), ("w2", "small", 2))
    assert one_by_one(state, gang, policy) == 2
    result = find_gang(state, gang, need=3, policy=policy)
    assert result.fits, result.reason
    nodes = {p.member: p.node for p in result.placed}
    assert nodes["ns/w0"] == big
    assert sorted(nodes.values()) == sorted([big, big, small])
    assert len(set(used_devices(result))) == len(used_devices(result)) == 5


def test_an_earlier_member_gets_other_devices_on_the_same_node() -> None:
    # One node: a large and a small GPU. The any-GPU member's first fit is the large one,
    # which the large-GPU member needs; searched together they both fit.
    state = cluster(**{"node-a": ["large", "small"]})
    gang = members(state, ("any", ANY, 1), ("big", "large", 1))
    assert one_by_one(state, gang, "binpack") == 1
    result = find_gang(state, gang, need=2)
    assert result.fits, result.reason
    by_member = {
        p.member: [d.device for a in p.allocations for d in a.devices] for p in result.placed
    }
    assert by_member == {"ns/any": ["d1"], "ns/big": ["d0"]}


def test_a_gang_that_cannot_fit_gets_nothing_and_says_why() -> None:
    # Four 1-GPU members of one kind, three GPUs: the free counts alone say so.
    state = cluster(**{"node-a": ["small"] * 2, "node-b": ["small"]})
    gang = members(state, *((f"w{i}", "small", 1) for i in range(4)))
    result = find_gang(state, gang, need=4)
    assert not result.fits and result.placed == ()
    assert "at most 3 of the gang's 4 members fit at once" in result.reason
    # Members of different classes: only the joint search can tell.
    mixed = members(state, *((f"w{i}", "small" if i % 2 else ANY, 1) for i in range(4)))
    result = find_gang(state, mixed, need=4)
    assert not result.fits and result.placed == ()
    assert "not together" in result.reason
    assert not state.allocated.in_use(("gpu.example.com", "node-a", "d0"))  # nothing kept


def test_a_gang_the_free_counts_rule_out_is_refused_without_a_node_search() -> None:
    # Three 2-GPU members, 5 GPUs over two nodes (3 + 2): at most 2 fit, whatever the order.
    state = cluster(**{"node-a": ["small"] * 3, "node-b": ["small"] * 2})
    gang = members(state, *((f"w{i}", "small", 2) for i in range(3)))
    result = find_gang(state, gang, need=3)
    assert not result.fits and "at most 2 of the gang's 3 members" in result.reason
    assert result.searches == 0


def test_members_that_fit_nowhere_are_named() -> None:
    state = cluster(**{"node-a": ["small"] * 2})
    gang = members(state, ("w0", "small", 1), ("w1", "large", 1))
    result = find_gang(state, gang, need=2)
    assert not result.fits
    assert list(result.blocking) == ["ns/w1"]
    assert "only 1 of the gang's 2 members" in result.reason
    explanation = result.blocking["ns/w1"].explanation
    assert explanation is not None and explanation.reasons


def test_fewer_members_than_the_gang_size_wait() -> None:
    state = cluster(**{"node-a": ["small"] * 4})
    result = find_gang(state, members(state, ("w0", "small", 1)), need=2)
    assert not result.fits and "1 of 2 present" in result.reason


def test_more_members_than_needed_places_those_that_fit() -> None:
    state = cluster(**{"node-a": ["small"] * 2})
    gang = members(state, ("w0", "small", 1), ("w1", "small", 2), ("w2", "small", 1))
    result = find_gang(state, gang, need=2)
    assert result.fits
    assert [p.member for p in result.placed] == ["ns/w0", "ns/w2"]


def test_a_budget_too_small_is_reported_and_places_nothing() -> None:
    state = cluster(**{f"node-{n}": ["small"] for n in range(6)})
    gang = members(state, *((f"w{i}", "small" if i % 2 else ANY, 1) for i in range(7)))
    result = find_gang(state, gang, need=7, budget=20)
    assert not result.fits and result.budget_exhausted
    assert "gave up after 20 node searches" in result.reason
    assert result.placed == ()


def random_gang(rng: random.Random) -> tuple[AllocatorState, list[GangMember], int]:
    state = cluster(
        **{
            f"node-{n}": [rng.choice(["large", "small"]) for _ in range(rng.randint(0, 4))]
            for n in range(rng.randint(2, 6))
        }
    )
    specs = [
        (f"w{i}", rng.choice(["large", "small", ANY]), rng.randint(1, 3))
        for i in range(rng.randint(2, 6))
    ]
    gang = members(state, *specs)
    return state, gang, rng.randint(1, len(gang))


@pytest.mark.parametrize("seed", range(60))
def test_random_gangs_are_all_or_nothing_valid_and_deterministic(seed: int) -> None:
    state, gang, need = random_gang(random.Random(seed))
    result = find_gang(state, gang, need=need)
    again = find_gang(state, gang, need=need)
    assert result == again  # same input, same answer
    assert not any(state.is_assumed(c) for m in gang for c in m.claims)  # nothing kept
    if not result.fits:
        assert result.reason
        return
    assert len(result.placed) >= need
    used = used_devices(result)
    assert len(used) == len(set(used))  # never a device twice
    for placed in result.placed:
        member = next(m for m in gang if m.name == placed.member)
        # Every member's allocation is one the per-node search accepts on its own.
        alone = state.allocate(member.claims, placed.node)
        assert alone is not None
        for allocation in placed.allocations:
            for result_device in allocation.devices:
                assert result_device.device_id[1] == placed.node


def racks() -> tuple[AllocatorState, list[NodeInfo]]:
    """rack-a: a1 (2 GPUs), a2 (1); rack-b: b1 (2); c1 has no rack label (4)."""
    state = cluster(
        **{"a1": ["small"] * 2, "a2": ["small"], "b1": ["small"] * 2, "c1": ["small"] * 4}
    )
    labels = {"a1": "rack-a", "a2": "rack-a", "b1": "rack-b"}
    nodes = [
        NodeInfo(n, {"rack": labels[n]} if n in labels else {}) for n in ("a1", "a2", "b1", "c1")
    ]
    return state, nodes


def rack_gang(nodes: list[NodeInfo], size: int) -> list[GangMember]:
    return [GangMember(f"ns/w{i}", [wants(f"w{i}", "small")], nodes) for i in range(size)]


def test_a_gang_topology_keeps_every_member_in_one_label_value() -> None:
    state, nodes = racks()
    rack_of = {n.name: n.labels.get("rack") for n in nodes}
    # In first-fit order, c1 (listed first here, and without a rack) takes the whole gang.
    order = [nodes[3], *nodes[:3]]
    plain = find_gang(state, rack_gang(order, 3), need=3, policy="first-fit")
    assert plain.fits and {rack_of[p.node] for p in plain.placed} == {None}
    result = find_gang(state, rack_gang(order, 3), need=3, policy="first-fit", topology="rack")
    assert result.fits
    assert {rack_of[p.node] for p in result.placed} == {"rack-a"}
    # Four members fit in no rack (3 and 2 GPUs); the node without the label does not count.
    too_big = find_gang(state, rack_gang(nodes, 4), need=4, topology="rack")
    assert not too_big.fits and too_big.placed == ()
    assert "no value of node label rack has room for 4 members" in too_big.reason


def test_members_sharing_one_claim_get_one_allocation_for_it() -> None:
    # Two members reference the same ResourceClaim (a shared, resourceClaimName claim)
    # and nothing else. The claim is allocated once, so both members must go where its
    # devices are, and the gang must not place the claim twice with different devices.
    state = cluster(**{"node-a": ["small"], "node-b": ["small"]})
    nodes = [NodeInfo(n) for n in sorted(state.node_names())]
    shared = wants("shared", "small")
    gang = [GangMember("ns/w0", [shared], nodes), GangMember("ns/w1", [shared], nodes)]
    result = find_gang(state, gang, need=2, policy="binpack")
    assert result.fits, result.reason
    chosen = {tuple(d.device_id for a in p.allocations for d in a.devices) for p in result.placed}
    assert len(chosen) == 1, f"the shared claim was allocated twice: {sorted(chosen)}"
    assert len({p.node for p in result.placed}) == 1


def test_a_shared_claim_is_allocated_once_and_the_state_is_clean_after() -> None:
    # Three members: w0 and w2 share a claim for two small devices, w1 has its own. Only
    # node-b has two small devices, so both sharers must go there; the shared claim's two
    # devices are not counted twice (node-b has nothing left for a second copy of it).
    state = cluster(**{"node-a": ["small"], "node-b": ["small", "small"], "node-c": ["small"]})
    nodes = [NodeInfo(n) for n in sorted(state.node_names())]
    shared = wants("shared", "small", 2)
    gang = [
        GangMember("ns/w0", [shared], nodes),
        GangMember("ns/w1", [wants("own", "small")], nodes),
        GangMember("ns/w2", [shared], nodes),
    ]
    result = find_gang(state, gang, need=3, policy="first-fit")
    assert result.fits, result.reason
    by_member = {p.member: p for p in result.placed}
    assert by_member["ns/w0"].node == by_member["ns/w2"].node == "node-b"
    assert by_member["ns/w0"].allocations == by_member["ns/w2"].allocations
    assert by_member["ns/w1"].node in ("node-a", "node-c")
    devices = used_devices(result)
    assert len(set(devices)) == 3  # two for the shared claim (listed twice), one for w1
    # Nothing stays assumed: every device is free again for a per-pod search.
    assert state.find_node([wants("probe", "small", 2)], nodes, "first-fit").node == "node-b"


def test_a_gang_whose_shared_claim_fits_once_but_not_twice_is_placed() -> None:
    # One node with one device: two members sharing a one-device claim fit (the count
    # shortcut would say two devices are needed and refuse at once).
    state = cluster(**{"node-a": ["small"]})
    nodes = [NodeInfo("node-a")]
    shared = wants("shared", "small")
    gang = [GangMember("ns/w0", [shared], nodes), GangMember("ns/w1", [shared], nodes)]
    result = find_gang(state, gang, need=2)
    assert result.fits, result.reason
    assert {p.node for p in result.placed} == {"node-a"}


# --- topology by device attribute ------------------------------------------------------------

NVL = "attribute:gpu.example.com/nvlinkDomain"


def domains(**nodes: Sequence[str | None]) -> AllocatorState:
    """node name -> the NVLink domain of each "small" GPU (None: without the attribute)."""
    state = AllocatorState()
    for node, values in nodes.items():
        devices = [gpu(f"d{i}", value) for i, value in enumerate(values)]
        state.upsert_slice(node_slice(node, devices))
    state.upsert_class(model_class("small"))
    return state


def domain_gang(
    state: AllocatorState, size: int, order: list[str] | None = None
) -> list[GangMember]:
    nodes = [NodeInfo(n) for n in order or sorted(state.node_names())]
    return [GangMember(f"ns/w{i}", [wants(f"w{i}", "small")], nodes) for i in range(size)]


def domain_of(state: AllocatorState, device_id: tuple[str, str, str]) -> str | None:
    attr = state.device(device_id).lookup_attribute("gpu.example.com/nvlinkDomain")
    return None if attr is None else attr.values[0]


def used_domains(state: AllocatorState, result: GangPlacement) -> set[str | None]:
    return {domain_of(state, d) for d in used_devices(result)}


@pytest.mark.parametrize("policy", ["binpack", "spread", "first-fit"])
def test_an_attribute_topology_refuses_a_placement_that_mixes_values(policy: str) -> None:
    # Two GPUs of domain A and two of B over two nodes: four members fit only mixed.
    state = domains(**{"node-a": ["A", "B"], "node-b": ["A", "B"]})
    plain = find_gang(state, domain_gang(state, 4), need=4, policy=policy)
    assert plain.fits and used_domains(state, plain) == {"A", "B"}
    result = find_gang(state, domain_gang(state, 4), need=4, policy=policy, topology=NVL)
    assert not result.fits and result.placed == ()
    assert result.reason.startswith(
        "no value of device attribute gpu.example.com/nvlinkDomain has room for 4 members"
    )
    assert "(A: " in result.reason and "; B: " in result.reason  # each value, and why
    assert not any(state.is_assumed(c) for m in domain_gang(state, 4) for c in m.claims)


@pytest.mark.parametrize("policy", ["binpack", "spread", "first-fit"])
def test_an_attribute_topology_keeps_every_member_on_one_value(policy: str) -> None:
    # Three members: first fit alone takes node-a's three GPUs (A, B, B). Only A has
    # three GPUs (one on node-a, two on node-b): every member gets an A GPU.
    state = domains(**{"node-a": ["A", "B", "B"], "node-b": ["A", "A"]})
    plain = find_gang(state, domain_gang(state, 3), need=3, policy="first-fit")
    assert plain.fits and used_domains(state, plain) == {"A", "B"}
    result = find_gang(state, domain_gang(state, 3), need=3, policy=policy, topology=NVL)
    assert result.fits, result.reason
    assert used_domains(state, result) == {"A"}
    assert sorted(used_devices(result)) == [
        ("gpu.example.com", "node-a", "d0"),
        ("gpu.example.com", "node-b", "d0"),
        ("gpu.example.com", "node-b", "d1"),
    ]


def test_the_value_with_most_free_devices_is_tried_first_then_by_value() -> None:
    # B has three free GPUs, A two: B first, though A sorts first and is listed first.
    state = domains(**{"node-a": ["A", "A"], "node-b": ["B", "B", "B"]})
    result = find_gang(state, domain_gang(state, 2), need=2, policy="first-fit", topology=NVL)
    assert result.fits and used_domains(state, result) == {"B"}
    # Taken devices do not count: with two of B's GPUs in use, A has more room.
    taken = wants("other", "small", 2)
    found = state.find_node([taken], [NodeInfo("node-b")], "first-fit")
    state.assume(taken, found.allocations[0])
    result = find_gang(state, domain_gang(state, 2), need=2, policy="first-fit", topology=NVL)
    assert result.fits and used_domains(state, result) == {"A"}
    state.release(taken)
    # A tie is broken by the value, whatever the node order: A before B.
    state = domains(**{"node-a": ["B", "B"], "node-b": ["A", "A"]})
    for order in (["node-a", "node-b"], ["node-b", "node-a"]):
        gang = domain_gang(state, 2, order)
        result = find_gang(state, gang, need=2, policy="first-fit", topology=NVL)
        assert result.fits and used_domains(state, result) == {"A"}
        assert result == find_gang(state, gang, need=2, policy="first-fit", topology=NVL)


def test_devices_without_the_attribute_are_not_used() -> None:
    # node-a (listed first) has four GPUs without the attribute: a plain first-fit gang
    # goes there, a gang kept together by the attribute does not, and nodes that reach no
    # device with the value are not even searched.
    listed: dict[str, list[str | None]] = {"node-a": [None] * 4, "node-b": ["A", None, "A"]}
    state = domains(**listed, **{f"node-x{i}": [None] * 2 for i in range(30)})
    order = ["node-a", *(f"node-x{i}" for i in range(30)), "node-b"]
    plain = find_gang(state, domain_gang(state, 2, order), need=2, policy="first-fit")
    assert plain.fits and {p.node for p in plain.placed} == {"node-a"}
    gang = domain_gang(state, 2, order)
    result = find_gang(state, gang, need=2, policy="first-fit", topology=NVL)
    assert result.fits, result.reason
    assert sorted(used_devices(result)) == [
        ("gpu.example.com", "node-b", "d0"),
        ("gpu.example.com", "node-b", "d2"),
    ]
    assert result.searches <= 2
    # Three members: two A GPUs, and the GPU without the attribute is not one of them.
    too_big = find_gang(state, domain_gang(state, 3, order), need=3, topology=NVL)
    assert not too_big.fits
    assert "no value of device attribute gpu.example.com/nvlinkDomain" in too_big.reason


def test_an_attribute_no_device_has_is_named_in_the_reason() -> None:
    state = domains(**{"node-a": [None, None]})
    result = find_gang(state, domain_gang(state, 2), need=2, topology=NVL)
    assert not result.fits and result.placed == () and result.searches == 0
    assert result.reason == (
        "no value of device attribute gpu.example.com/nvlinkDomain has room for 2 members "
        "together: no device on the members' candidate nodes has the attribute"
    )


def test_a_shared_claim_under_an_attribute_topology_is_allocated_once() -> None:
    # w0 and w2 share a one-GPU claim, w1 has its own. node-a (no attribute) is first in
    # first-fit order; B has the most GPUs: the shared claim gets one B GPU, once, and
    # both sharers go where it is.
    layout: dict[str, list[str | None]] = {
        "node-a": [None, None],
        "node-b": ["A"],
        "node-c": ["B", "B"],
    }
    state = domains(**layout)
    nodes = [NodeInfo(n) for n in sorted(state.node_names())]
    shared = wants("shared", "small")
    gang = [
        GangMember("ns/w0", [shared], nodes),
        GangMember("ns/w1", [wants("own", "small")], nodes),
        GangMember("ns/w2", [shared], nodes),
    ]
    result = find_gang(state, gang, need=3, policy="first-fit", topology=NVL)
    assert result.fits, result.reason
    by_member = {p.member: p for p in result.placed}
    assert by_member["ns/w0"].allocations == by_member["ns/w2"].allocations
    assert by_member["ns/w0"].node == by_member["ns/w2"].node == "node-c"
    assert used_domains(state, result) == {"B"}
    assert len(set(used_devices(result))) == 2  # the shared claim's GPU, and w1's
    assert not any(state.is_assumed(c) for m in gang for c in m.claims)
    # Under A (one GPU) the gang does not fit: the shared claim counts once, w1 needs a second.
    layout = {"node-a": [None, None], "node-b": ["A"]}
    state = domains(**layout)
    nodes = [NodeInfo(n) for n in sorted(state.node_names())]
    gang = [GangMember(m.name, m.claims, nodes) for m in gang]
    assert not find_gang(state, gang, need=3, topology=NVL).fits
    assert find_gang(state, gang[::2], need=2, topology=NVL).fits  # the two sharers alone


def test_a_gang_topology_string_is_parsed_like_the_annotation() -> None:
    state = domains(**{"node-a": ["A"]})
    with pytest.raises(ValueError, match="fully qualified device attribute name"):
        find_gang(state, domain_gang(state, 1), need=1, topology="attribute:nvlinkDomain")


def random_domains(rng: random.Random) -> dict[str, list[str | None]]:
    return {
        f"node-{n}": [rng.choice(["A", "B", "C", None]) for _ in range(rng.randint(0, 4))]
        for n in range(rng.randint(2, 5))
    }


@pytest.mark.parametrize("seed", range(40))
def test_random_attribute_topologies_fit_exactly_when_one_value_alone_fits(seed: int) -> None:
    # Under the attribute topology the gang fits iff, for some value, it fits on a cluster
    # that has only that value's devices; and then it uses devices of one value only.
    rng = random.Random(seed)
    layout = random_domains(rng)
    state = domains(**layout)
    counts = [rng.randint(1, 2) for _ in range(rng.randint(2, 4))]
    nodes = [NodeInfo(n) for n in sorted(layout)]

    def gang() -> list[GangMember]:
        return [
            GangMember(f"ns/w{i}", [wants(f"w{i}", "small", c)], nodes)
            for i, c in enumerate(counts)
        ]

    need = rng.randint(1, len(counts))
    result = find_gang(state, gang(), need=need, topology=NVL)
    assert result == find_gang(state, gang(), need=need, topology=NVL)
    assert not any(state.is_assumed(c) for m in gang() for c in m.claims)
    fits_alone = []
    for value in ("A", "B", "C"):
        only = AllocatorState()
        for node, values in layout.items():
            kept = [gpu(f"d{i}", v) for i, v in enumerate(values) if v == value]
            only.upsert_slice(node_slice(node, kept))
        only.upsert_class(model_class("small"))
        if find_gang(only, gang(), need=need).fits:
            fits_alone.append(value)
    assert result.fits == bool(fits_alone), (layout, counts, need, result.reason)
    if result.fits:
        assert len(result.placed) >= need
        used = used_domains(state, result)
        assert len(used) == 1 and used <= set(fits_alone)
        assert len(set(used_devices(result))) == len(used_devices(result))


def quota(devices: int | None = None, claims: int | None = None, **spec: Any) -> dict[str, Any]:
    hard = {k: v for k, v in (("devices", devices), ("claims", claims)) if v is not None}
    return {
        "metadata": {"name": "gpus", "namespace": "ns"},
        "spec": {"deviceClassName": ANY, "hard": hard, **spec},
    }


def test_a_gang_a_device_quota_refuses_is_told_which_quota_and_how_far() -> None:
    """Each member fits under the quota alone, not all together: the reason names the quota,
    what it has used and what the gang needs, as a single pod's does (it said "each fits
    alone, but not together" before)."""
    state = cluster(**{"node-a": ["small"] * 4, "node-b": ["small"] * 4})
    state.upsert_quota(quota(devices=3))
    gang = members(state, ("w0", ANY, 1), ("w1", ANY, 1), ("w2", ANY, 2))
    result = find_gang(state, gang, need=3, policy="binpack")
    assert not result.fits
    assert result.reason == (
        "DeviceQuota ns/gpus: devices 0 of 3 used, and the gang's 3 members placed together "
        f"need 4 more (class {ANY})"
    )
    assert result.searches == 0, "told by the quota's room, before any node search"
    # Two of them fit (the quota counts the smallest): with need=2 the gang is placed.
    assert find_gang(state, gang, need=2, policy="binpack").fits
    # A limit on claims is told the same way.
    state.upsert_quota(quota(claims=2))
    result = find_gang(state, gang, need=3, policy="binpack")
    assert result.reason.startswith("DeviceQuota ns/gpus: claims 0 of 2 used"), result.reason


def test_a_quota_with_selectors_leaves_the_gang_to_the_search() -> None:
    """It counts some devices only: the room cannot tell, the search decides (and places
    the gang where the quota's devices are not needed)."""
    state = cluster(**{"node-a": ["small"] * 4})
    state.upsert_quota(quota(devices=0, selectors=[{"cel": {"expression": "false"}}]))
    gang = members(state, ("w0", ANY, 1), ("w1", ANY, 1))
    assert find_gang(state, gang, need=2, policy="binpack").fits


def test_a_members_own_unconfirmed_assumption_does_not_count_against_its_gang() -> None:
    """A member's claim still counted from a write the watch has not shown yet (the caller
    passes it as unallocated) is replaced by the search, not added to: the quota's room
    must not count it twice."""
    state = cluster(**{"node-a": ["small"] * 4})
    state.upsert_quota(quota(devices=2))
    nodes = [NodeInfo("node-a")]
    a, b = wants("a", ANY), wants("b", ANY)
    earlier = state.find_node([a], nodes, "binpack", explain=False)
    state.assume(a, earlier.allocations[0])
    gang = [GangMember("ns/a", [a], nodes), GangMember("ns/b", [b], nodes)]
    result = find_gang(state, gang, need=2, policy="binpack")
    assert result.fits, result.reason
