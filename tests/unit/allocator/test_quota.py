"""DeviceQuota accounting in the allocator: what counts, when it is released, what refuses."""

from __future__ import annotations

import random
from typing import Any

import pytest

from operators.allocator import AllocatorState, Features
from operators.allocator.quota import compile_quota
from operators.api.models import DeviceQuota

DRIVER = "gpu.example.com"
NS = "team-a"


def gpu_slice(node: str, models: list[str], memory: str = "80Gi", shared: bool = False) -> Any:
    devices = []
    for i, model in enumerate(models):
        device: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": {"model": {"string": model}},
            "capacity": {"memory": {"value": memory}},
        }
        if shared:
            device["allowMultipleAllocations"] = True
        devices.append(device)
    return {
        "metadata": {"name": f"{node}-gpus", "resourceVersion": "1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim(name: str, count: int | None = 1, namespace: str = NS, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", **extra}
    if count is None:
        exactly["allocationMode"] = "All"
    else:
        exactly["count"] = count
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def quota(
    name: str = "gpus", selectors: tuple[str, ...] = (), cls: str = "gpu", **hard: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "deviceClassName": cls,
            "selectors": [{"cel": {"expression": e}} for e in selectors],
            "hard": hard,
        },
    }


def cluster(
    nodes: int = 2, models: tuple[str, ...] = ("a100",) * 4, shared: bool = False, **kw: Any
) -> AllocatorState:
    state = AllocatorState(Features(consumable_capacity=True) if shared else None)
    for n in range(nodes):
        state.upsert_slice(gpu_slice(f"node-{n}", list(models), shared=shared, **kw))
    state.upsert_class({"metadata": {"name": "gpu"}, "spec": {}})
    return state


NODES = ["node-0", "node-1"]


def place(state: AllocatorState, *claims: dict[str, Any]) -> Any:
    """find_node, and assume what it chose (as the operator does while it writes)."""
    found = state.find_node(list(claims), NODES)
    if found.node is not None:
        for c, allocation in zip(claims, found.allocations, strict=True):
            state.assume(c, allocation)
    return found


def used(state: AllocatorState, name: str = "gpus") -> Any:
    return state.quotas.status(state.quotas.quotas[NS][name]).used


def reason(found: Any) -> str:
    assert found.node is None and found.explanation is not None
    return found.explanation.aggregate_line()


def test_device_count_limits_the_namespace_across_nodes() -> None:
    state = cluster()
    state.upsert_quota(quota(devices=3))
    assert place(state, claim("a", 2)).node is not None
    found = place(state, claim("b", 2))
    assert "DeviceQuota team-a/gpus: devices 2 of 3 used, claim needs 2" in reason(found)
    assert place(state, claim("c", 1)).node is not None
    assert used(state).devices == 3


def test_other_namespaces_are_not_limited() -> None:
    state = cluster()
    state.upsert_quota(quota(devices=0))
    assert place(state, claim("a", 2, namespace="team-b")).node is not None


def test_all_mode_counts_what_it_got_not_32() -> None:
    state = cluster(models=("a100",) * 3)
    state.upsert_quota(quota(devices=4))
    found = place(state, claim("all", None))
    assert found.node is not None
    assert used(state).devices == 3
    # refused at the device that would be one too many (an All request takes them in turn)
    assert "devices 3 of 4 used, claim needs 2" in reason(place(state, claim("again", None)))


def test_capacity_of_whole_devices_is_summed() -> None:
    state = cluster()
    state.upsert_quota(quota(capacity={"memory": "160Gi"}))
    assert place(state, claim("a", 2)).node is not None
    assert "DeviceQuota team-a/gpus: memory 160Gi of 160Gi used, claim needs 80Gi" in reason(
        place(state, claim("b", 1))
    )


def test_consumable_capacity_counts_what_the_share_consumes() -> None:
    state = cluster(nodes=1, models=("a100",), shared=True, memory="160Gi")
    state.upsert_quota(quota(capacity={"memory": "160Gi"}))
    share: dict[str, Any] = {"capacity": {"requests": {"memory": "40Gi"}}}
    for i in range(2):
        assert place(state, claim(f"s{i}", 1, **share)).node is not None
    assert used(state).capacity == {"memory": 80 * 2**30 * 10**9}
    state.upsert_quota(quota(capacity={"memory": "100Gi"}))
    assert "memory 80Gi of 100Gi used, claim needs 40Gi" in reason(
        place(state, claim("s2", 1, **share))
    )


def test_claims_limit_counts_each_claim_once() -> None:
    state = cluster()
    state.upsert_quota(quota(claims=1))
    assert place(state, claim("a", 3)).node is not None
    assert used(state).claims == 1
    assert "claims 1 of 1 used, claim needs 1" in reason(place(state, claim("b", 1)))


def test_selector_narrows_what_is_counted_and_the_search_goes_around_it() -> None:
    models = ("a100", "a100", "h100", "h100")
    state = cluster(nodes=1, models=models)
    expr = f'device.attributes["{DRIVER}"].model == "a100"'
    state.upsert_quota(quota(selectors=(expr,), devices=1))
    found = place(state, claim("a", 3))
    assert found.node is not None
    picked = sorted(d.device for d in found.allocations[0].devices)
    assert picked == ["gpu-0", "gpu-2", "gpu-3"]  # one A100 (the limit), both H100s
    assert used(state).devices == 1


def test_admin_access_is_not_charged() -> None:
    state = cluster(nodes=1)
    state.upsert_quota(quota(devices=0))
    found = place(state, claim("admin", 1, adminAccess=True))
    assert found.node is not None
    assert used(state).devices == 0


def test_deallocation_and_release_give_back() -> None:
    state = cluster(nodes=1)
    state.upsert_quota(quota(devices=2))
    a = claim("a", 2)
    found = place(state, a)
    assert used(state).devices == 2
    state.release(a)  # the write failed
    assert used(state).devices == 0
    allocated = {**a, "status": {"allocation": found.allocations[0].to_dict()}}
    state.upsert_claim(allocated)  # the watch shows it
    assert used(state).devices == 2
    state.upsert_claim(a)  # deallocated
    assert used(state).devices == 0


def test_usage_is_recomputed_from_claims_alone() -> None:
    """A second replica (or a restart) that only sees the claims gets the same usage."""
    first = cluster()
    first.upsert_quota(quota(devices=4, capacity={"memory": "1Ti"}))
    allocated = []
    for i in range(3):
        c = claim(f"c{i}", 1)
        found = place(first, c)
        allocated.append({**c, "status": {"allocation": found.allocations[0].to_dict()}})
    second = cluster()
    for c in allocated:
        second.upsert_claim(c)
    second.upsert_quota(quota(devices=4, capacity={"memory": "1Ti"}))  # after the claims
    assert used(second) == used(first)
    assert used(second).devices == 3


def test_the_second_of_two_racers_for_the_last_unit_waits() -> None:
    state = cluster()
    state.upsert_quota(quota(devices=1))
    first = place(state, claim("first", 1))  # assumed, not yet confirmed by the watch
    assert first.node is not None
    assert "devices 1 of 1 used, claim needs 1" in reason(place(state, claim("second", 1)))


def test_two_claims_of_one_pod_add_up() -> None:
    state = cluster(nodes=1)
    state.upsert_quota(quota(devices=3))
    found = place(state, claim("x", 2), claim("y", 2))
    assert "DeviceQuota team-a/gpus: devices 2 of 3 used, claim needs 2" in reason(found)


def test_invalid_selector_blocks_and_unknown_class_does_not() -> None:
    state = cluster(nodes=1)
    state.upsert_quota(quota(selectors=("device.driver ==",), devices=10))
    status = state.quotas.status(state.quotas.quotas[NS]["gpus"])
    assert status.invalid is not None and "CEL compile error" in status.invalid
    assert status.blocking
    assert "DeviceQuota team-a/gpus is invalid (selector #0: CEL compile error" in reason(
        place(state, claim("a", 1))
    )
    state.upsert_quota(quota(cls="no-such-class", devices=0))
    status = state.quotas.status(state.quotas.quotas[NS]["gpus"])
    assert status.invalid == 'deviceclass "no-such-class" not found'
    assert not status.blocking
    assert place(state, claim("b", 1)).node is not None


def test_compile_quota_reads_the_model_fields() -> None:
    q = compile_quota(quota(devices=2, claims=1, capacity={"memory": "160Gi"}))
    assert (q.ref, q.class_name, q.devices, q.claims) == ("team-a/gpus", "gpu", 2, 1)
    assert [(n, str(v)) for n, v in q.capacity] == [("memory", "160Gi")]


def test_a_capacity_name_the_crd_lets_through_holds_back_instead_of_lifting_the_quota() -> None:
    # The CRD cannot check map keys (structural schemas have no propertyNames), so a name
    # such as "gpu-memory" (capacity names are C identifiers) reaches the operator. Refusing
    # the whole object made the cache drop the quota, and with it the devices limit beside.
    state = cluster()
    typo = DeviceQuota.model_validate(quota(devices=1, capacity={"gpu-memory": "80Gi"}))
    state.upsert_quota(typo)
    found = place(state, claim("a", 1))
    assert 'DeviceQuota team-a/gpus is invalid (capacity name "gpu-memory"' in reason(found)
    status = state.quotas.status(state.quotas.quotas[NS]["gpus"])
    assert (status.blocking, status.reason) == (True, "InvalidCapacityName")


def test_a_republished_capacity_is_counted_anew_for_claims_counted_before() -> None:
    state = cluster(nodes=1)
    state.upsert_quota(quota(capacity={"memory": "1Ti"}))
    assert place(state, claim("a", 1)).node is not None
    before = used(state).capacity["memory"]
    republished = gpu_slice("node-0", ["a100"] * 4, memory="40Gi")
    republished["metadata"]["resourceVersion"] = "2"
    state.upsert_slice(republished)
    assert used(state).capacity["memory"] == before // 2


def _random_claim(rng: random.Random, i: int) -> dict[str, Any]:
    namespace = rng.choice((NS, NS, "team-b"))
    shape = rng.random()
    if shape < 0.15:
        return claim(f"c{i}", None, namespace=namespace)  # All
    if shape < 0.25:
        return claim(f"c{i}", rng.randint(1, 2), namespace=namespace, adminAccess=True)
    if shape < 0.45:
        subs = [
            {"name": f"s{k}", "deviceClassName": "gpu", "count": rng.randint(1, 3)}
            for k in range(rng.randint(1, 3))
        ]
        return {
            "metadata": {"name": f"c{i}", "namespace": namespace, "uid": f"uid-c{i}"},
            "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": subs}]}},
        }
    return claim(f"c{i}", rng.randint(1, 3), namespace=namespace)


@pytest.mark.parametrize("seed", range(30))
def test_skipping_the_per_device_check_changes_no_outcome(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search skips the per-device quota check when no quota can be exceeded; every
    decision, reason and usage must be what the check device by device gives."""
    rng = random.Random(seed)
    hard: dict[str, Any] = {"devices": rng.randint(0, 10)}
    if rng.random() < 0.5:
        hard["claims"] = rng.randint(0, 5)
    if rng.random() < 0.2:
        hard["capacity"] = {"memory": f"{rng.randint(0, 8) * 80}Gi"}
    shortcut, checked = cluster(), cluster()
    for state in (shortcut, checked):
        state.upsert_quota(quota(**hard))
    monkeypatch.setattr(checked.quotas, "_cannot_refuse", lambda _claims: False)
    live: list[dict[str, Any]] = []
    for i in range(25):
        if live and rng.random() < 0.3:
            gone = live.pop(rng.randrange(len(live)))
            shortcut.remove_claim(gone)
            checked.remove_claim(gone)
            continue
        c = _random_claim(rng, i)
        a, b = place(shortcut, c), place(checked, c)
        assert a.node == b.node
        assert [x.to_dict() for x in a.allocations] == [x.to_dict() for x in b.allocations]
        if a.node is None:
            assert reason(a) == reason(b)
        else:
            live.append(c)
        assert used(shortcut) == used(checked)


def test_capacities_republished_while_no_quota_exists_are_read_anew() -> None:
    state = cluster(nodes=1)
    state.upsert_quota(quota(capacity={"memory": "1Ti"}))
    c = claim("a", 1)
    found = place(state, c)
    assert found.node is not None
    state.remove_quota(NS, "gpus")
    republished = gpu_slice("node-0", ["a100"] * 4, memory="40Gi")
    republished["metadata"]["resourceVersion"] = "2"
    state.upsert_slice(republished)
    state.upsert_quota(quota(capacity={"memory": "1Ti"}))
    assert used(state).capacity["memory"] == 40 * 2**30 * 10**9


@pytest.mark.parametrize("seed", range(25))
def test_usage_follows_the_claims_whether_the_quota_came_before_or_after_them(seed: int) -> None:
    """The book keeps claims by namespace only where a quota counts them: a quota added,
    dropped or added again counts the same as one that was always there."""
    rng = random.Random(seed)
    state = cluster(models=("a100",) * 8)
    confirmed: dict[str, int] = {}  # claim key -> devices, as the watch showed it
    assumed: dict[str, int] = {}
    objects: dict[str, dict[str, Any]] = {}
    allocations: dict[str, Any] = {}
    for step in range(60):
        op = rng.choice(["place", "place", "confirm", "release", "remove", "dealloc", "quota"])
        name = f"c{rng.randrange(8)}"
        namespace = rng.choice([NS, "team-b"])
        key = f"{namespace}/{name}"
        if op == "place" and key not in objects:
            obj = claim(name, rng.randint(1, 2), namespace=namespace)
            found = place(state, obj)
            if found.node is not None:
                objects[key], allocations[key] = obj, found.allocations[0]
                assumed[key] = len(found.allocations[0].devices)
        elif op == "confirm" and key in allocations:
            state.upsert_claim(
                {**objects[key], "status": {"allocation": allocations[key].to_dict()}}
            )
            confirmed[key] = len(allocations[key].devices)
            assumed.pop(key, None)
        elif op == "release" and key in objects:
            state.release(objects[key])
            assumed.pop(key, None)
        elif op == "dealloc" and key in objects:
            state.upsert_claim(objects[key])  # the watch shows no allocation
            confirmed.pop(key, None)
        elif op == "remove" and key in objects:
            state.remove_claim(objects.pop(key))
            allocations.pop(key)
            confirmed.pop(key, None)
            assumed.pop(key, None)
        elif op == "quota":
            if NS in state.quotas.quotas:
                state.quotas.remove_quota(NS, "gpus")
            else:
                state.upsert_quota(quota(devices=100))
        if NS in state.quotas.quotas:
            expected = sum(
                confirmed.get(k) or assumed.get(k) or 0
                for k in {*confirmed, *assumed}
                if k.startswith(f"{NS}/")
            )
            assert used(state).devices == expected, f"step {step}: {op} {key}"


def at_version(raw: dict[str, Any], version: int, allocation: Any = None) -> dict[str, Any]:
    out = {**raw, "metadata": {**raw["metadata"], "resourceVersion": str(version)}}
    if allocation is not None:
        out["status"] = {"allocation": allocation.to_dict()}
    return out


def test_a_watch_behind_our_write_does_not_lift_its_quota_charge() -> None:
    state = cluster(nodes=1)
    state.upsert_quota(quota(devices=2))
    written = at_version(claim("a", 2), 12)
    state.assume(written, state.find_node([written], NODES).allocations[0])
    lagging = state.find_node([claim("z", 2, namespace="other")], NODES).allocations[0]
    state.upsert_claim(at_version(claim("a", 2), 11, lagging))  # the watch, behind our write
    state.upsert_claim(at_version(claim("a", 2), 12))  # the version our write is made over
    assert state.is_assumed(written)
    assert used(state).devices == 2
    assert state.find_node([claim("b", 2)], NODES).node is None, "the quota was exceeded"


def test_a_share_decided_again_while_the_watch_shows_the_old_one_counts_both() -> None:
    state = cluster(nodes=1, models=("a100", "a100"), shared=True, memory="160Gi")
    share: dict[str, Any] = {"capacity": {"requests": {"memory": "40Gi"}}}
    old = state.find_node([claim("a", 1, **share)], NODES).allocations[0]
    state.upsert_claim(at_version(claim("a", 1, **share), 11, old))
    given_back = at_version(claim("a", 1, **share), 12)
    new = state.find_node([given_back], NODES).allocations[0]
    state.assume(given_back, new)  # consumed capacity is a dict: counted without hashing
    state.upsert_claim(at_version(claim("a", 1, **share), 13, new))
    assert not state.is_assumed(given_back)
    state.remove_claim(given_back)
    assert not state.is_assumed(given_back)
