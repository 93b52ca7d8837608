"""Gangs in the allocation controller: which pod events make a gang's other members decide again; a claim members share."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

import pytest

from operators.api.annotations import (
    GANG_ANNOTATION,
    GANG_SIZE_ANNOTATION,
    GANG_TOPOLOGY_ANNOTATION,
    GangRef,
)
from operators.cache.core import SCHEDULING_GATE, Pod, parse_pod
from operators.cache.informer import Key
from operators.controllers.allocation import AllocationController, gangdecision
from operators.controllers.allocation import decide as deciding
from operators.controllers.allocation.gangdecision import member_changed
from operators.kube import POD_GROUPS, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, ApiError, NotFound

from ..fakes import (
    DRIVER,
    WRITES,
    FakeClient,
    allocated,
    apply_merge_patch,
    claim,
    one_device_cluster,
    pod,
    put,
    resource_slice,
)
from .test_failures import allocation_results, allocation_writes, messages, sync


def member(gated: bool, phase: str = "Pending", gang: str = "train", **meta: Any) -> Pod:
    raw: dict[str, Any] = {
        "metadata": {
            "namespace": "ns",
            "name": "w0",
            "uid": "uid-w0",
            "resourceVersion": "1",
            "annotations": {GANG_ANNOTATION: gang, GANG_SIZE_ANNOTATION: "2"},
            **meta,
        },
        "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}] if gated else []},
        "status": {"phase": phase},
    }
    return parse_pod(raw)


def test_a_released_member_that_runs_on_does_not_wake_its_gang() -> None:
    # Each status update of a running member used to requeue every other member: a gang of
    # N pods cost N queue entries (and, for members still waiting, a gang search) per event.
    assert not member_changed(member(False, "Pending"), member(False, "Running"))


def test_leaving_or_being_released_wakes_the_gang() -> None:
    assert member_changed(member(True), member(False))  # released
    assert member_changed(member(True), None)  # deleted
    assert member_changed(member(False, "Running"), None)
    assert member_changed(member(True), member(True, gang="other"))  # moved
    assert member_changed(member(False, "Running"), member(False, "Succeeded"))  # finished
    assert not member_changed(member(True), member(True))  # a gated member's own update


# --- a claim the members share ------------------------------------------------------------


def train_members(controller: AllocationController, claims: dict[str, str]) -> None:
    """Gated members of gang "train" (size 2), each naming its claim, which exists."""
    for claim_name in sorted(set(claims.values())):
        put(controller.runtime, RESOURCE_CLAIMS, claim("ns", claim_name))
    for name, claim_name in claims.items():
        raw = pod("ns", name, [{"name": "dev", "resourceClaimName": claim_name}])
        raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: "2"}
        put(controller.runtime, PODS, raw)


async def test_members_sharing_a_claim_allocate_it_once_and_both_reserve_it() -> None:
    """Two gang members name the same ResourceClaim. Its allocation is written once; the
    second member only adds itself to reservedFor (a second allocation write would replace
    the first member's devices, or conflict on the server)."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    train_members(controller, {"w0": "shared", "w1": "shared"})
    await sync(controller, Key("ns", "w0"))
    assert [path for path, _ in allocation_results(client)] == [
        RESOURCE_CLAIMS.path("ns", "shared") + "/status"
    ]
    stored = client.objects[RESOURCE_CLAIMS.path("ns", "shared")]
    assert sorted(r["name"] for r in stored["status"]["reservedFor"]) == ["w0", "w1"]
    for name in ("w0", "w1"):
        written = client.objects[PODS.path("ns", name)]
        assert not written["spec"].get("schedulingGates"), f"{name} still gated"


async def test_a_shared_claim_whose_write_got_no_answer_stays_counted_for_the_members_after() -> (
    None
):
    """The first member's allocation of the shared claim gets no answer (it may have landed):
    its writer keeps the device counted until that is known, and the member not attempted
    after it must not give the same claim back (a pod deciding next then got the device the
    unanswered write may hold)."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    train_members(controller, {"w0": "shared", "w1": "shared"})
    status_path = RESOURCE_CLAIMS.path("ns", "shared") + "/status"
    client.fail = lambda method, path, _body: (
        TimeoutError() if method == "PATCH" and path == status_path else None
    )
    await decide(controller, Key("ns", "w0"))
    assert Key("ns", "shared") in controller.writer.unanswered
    client.fail = lambda _method, _path, _body: None
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "other"))
    put(controller.runtime, PODS, pod("ns", "p", [{"name": "dev", "resourceClaimName": "other"}]))
    await decide(controller, Key("ns", "p"))
    taken = [path for path, _ in allocation_results(client) if "/other/" in path]
    assert taken == [], "the device an unanswered write may hold was handed out again"


async def test_a_refused_gang_write_is_told_on_the_member_whose_write_it_was() -> None:
    client = FakeClient()
    controller = group_cluster(client)
    train_members(controller, {"w0": "c-w0", "w1": "c-w1"})
    refused = RESOURCE_CLAIMS.path("ns", "c-w1") + "/status"
    client.fail = lambda method, path, _body: (
        ApiError(422, "Invalid", "status.allocation: Invalid value")
        if method == "PATCH" and path == refused
        else None
    )
    await decide(controller, Key("ns", "w0"))
    told = [
        e["involved"]["metadata"]["name"]
        for e in client.events
        if e["reason"] == "FailedAllocation"
    ]
    assert told == ["w1"], told


# --- topology by device attribute ---------------------------------------------------------


def gang_pod(name: str, claim_name: str, topology: str) -> dict[str, Any]:
    raw = pod("ns", name, [{"name": "dev", "resourceClaimName": claim_name}])
    raw["metadata"]["annotations"] |= {
        GANG_ANNOTATION: "train",
        GANG_SIZE_ANNOTATION: "2",
        GANG_TOPOLOGY_ANNOTATION: topology,
    }
    return raw


async def test_a_gang_with_an_attribute_topology_gets_devices_of_one_value() -> None:
    """n1's devices: dev-0 in NVLink domain A, dev-1 and dev-2 in B, dev-3 in none. Each
    member alone would take dev-0 and then dev-1 (first fit, two domains); the gang gets
    two devices of B."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    domains = ["A", "B", "B", None]
    raw_slice = resource_slice("n1", devices=4)
    for device, domain in zip(raw_slice["spec"]["devices"], domains, strict=True):
        if domain is not None:
            device["attributes"] = {"nvlinkDomain": {"string": domain}}
    raw_slice["metadata"]["resourceVersion"] = "2"
    put(controller.runtime, RESOURCE_SLICES, raw_slice)
    for name in ("w0", "w1"):
        put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"c-{name}"))
        put(
            controller.runtime,
            PODS,
            gang_pod(name, f"c-{name}", f"attribute:{DRIVER}/nvlinkDomain"),
        )
    await sync(controller, Key("ns", "w0"))
    written = sorted(r["device"] for _, results in allocation_results(client) for r in results)
    assert written == ["dev-1", "dev-2"]


async def test_a_malformed_gang_topology_is_told_on_the_pod() -> None:
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", "c-w0"))
    put(controller.runtime, PODS, gang_pod("w0", "c-w0", "attribute:nvlinkDomain"))
    await sync(controller, Key("ns", "w0"))
    assert not allocation_results(client)
    [message] = {m for m in messages(client, "w0")}
    assert GANG_TOPOLOGY_ANNOTATION in message
    assert "is not a fully qualified device attribute name" in message


# --- gangs named by upstream's Workload API PodGroups ----------------------------------------


def pod_group(name: str = "workers", **policy: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"uid-pg-{name}",
            "resourceVersion": "3",
        },
        "spec": {"schedulingPolicy": policy or {"gang": {"minCount": 3}}},
    }


def group_cluster(client: FakeClient, devices: int = 3, **settings: Any) -> AllocationController:
    """Node n1 with ``devices`` devices; PodGroups served (an empty list was read)."""
    runtime = one_device_cluster(client, **settings)
    slice_ = resource_slice("n1", devices)
    slice_["metadata"]["resourceVersion"] = "2"
    runtime.cache[RESOURCE_SLICES].apply("ADDED", slice_)
    return AllocationController(runtime)


def group_member(
    controller: AllocationController, name: str, group: str = "workers", **annotations: str
) -> Key:
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"c-{name}"))
    raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"c-{name}"}])
    raw["spec"]["schedulingGroup"] = {"podGroupName": group}
    raw["metadata"]["annotations"] |= annotations
    put(controller.runtime, PODS, raw)
    return Key("ns", name)


async def decide(controller: AllocationController, key: Key) -> None:
    """One decision for ``key`` (its gang's, if it has one), writes included."""
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        await controller.sync(key)


def released(client: FakeClient) -> list[str]:
    """Pods whose gate the controller lifted, by name."""
    return sorted(
        path.rsplit("/", 1)[1]
        for path, obj in client.objects.items()
        if path.startswith(PODS.path("ns") + "/") and not obj["spec"].get("schedulingGates")
    )


def told(client: FakeClient, name: str) -> list[str]:
    return [e["message"] for e in client.events if e["involved"]["metadata"]["name"] == name]


def condition_messages(client: FakeClient, name: str) -> list[str]:
    """The messages of the pod's conditions the controller wrote, in order."""
    return [
        str(condition["message"])
        for call in client.writes(PODS.path("ns", name))
        for condition in ((call.body or {}).get("status") or {}).get("conditions") or []
    ]


async def two_of_three_waiting(client: FakeClient) -> tuple[AllocationController, Key]:
    """PodGroup "workers" (minCount 3) with members w0 and w1, decided once: both wait."""
    controller = group_cluster(client)
    put(controller.runtime, POD_GROUPS, pod_group())
    w0 = group_member(controller, "w0")
    group_member(controller, "w1")
    await decide(controller, w0)
    assert released(client) == []
    return controller, w0


async def test_pods_of_a_gang_pod_group_are_released_together_once_min_count_are_there() -> None:
    client = FakeClient()
    controller, w0 = await two_of_three_waiting(client)
    assert not allocation_writes(client)
    waits = 'PodGroup "workers" waits for its members: it is placed once 3 are present'
    for name in ("w0", "w1"):
        assert any(waits in m for m in condition_messages(client, name)), name
    # The gang's Event on its first member only.
    assert any(waits in m for m in told(client, "w0")) and told(client, "w1") == []
    group_member(controller, "w2")
    await decide(controller, w0)
    assert released(client) == ["w0", "w1", "w2"]
    assert len(allocation_writes(client)) == 3


async def test_gang_annotations_win_over_the_pods_pod_group() -> None:
    """The PodGroup asks for 3; the annotations of its two pods name a gang of 2 of their own:
    the annotations decide."""
    client = FakeClient()
    controller = group_cluster(client)
    put(controller.runtime, POD_GROUPS, pod_group())
    gang = {GANG_ANNOTATION: "pair", GANG_SIZE_ANNOTATION: "2"}
    w0 = group_member(controller, "w0", **gang)
    group_member(controller, "w1", **gang)
    await decide(controller, w0)
    assert released(client) == ["w0", "w1"]


async def test_a_pod_whose_pod_group_does_not_exist_waits_and_its_creation_wakes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gangdecision, "POD_GROUP_GRACE", 0.0)
    client = FakeClient()
    controller = group_cluster(client)
    w0 = group_member(controller, "w0")
    await decide(controller, w0)
    assert released(client) == [] and not allocation_writes(client)
    [message] = told(client, "w0")
    assert 'PodGroup "workers"' in message and "does not exist" in message, message
    assert w0 in controller.waiting
    # The PodGroup appears (minCount 1): the pod is queued at once and placed.
    controller.queue.forget(w0)
    controller.queue._delayed_at.clear()  # only the wake-up may queue it now
    controller.queue._delayed.clear()
    put(controller.runtime, POD_GROUPS, pod_group(gang={"minCount": 1}))
    assert controller.queue.due_in(w0) == 0.0
    await decide(controller, w0)
    assert released(client) == ["w0"]


async def test_a_pod_group_change_wakes_its_pods_but_a_status_update_does_not() -> None:
    client = FakeClient()
    controller = group_cluster(client)
    put(controller.runtime, POD_GROUPS, pod_group())
    w0 = group_member(controller, "w0")
    await decide(controller, w0)  # 1 of 3: waits
    controller.queue._ready.clear()
    controller.queue._queued.clear()
    status_only = pod_group()
    status_only["metadata"]["resourceVersion"] = "4"
    status_only["status"] = {"conditions": [{"type": "PodGroupInitiallyScheduled"}]}
    put(controller.runtime, POD_GROUPS, status_only)
    assert controller.queue.due_in(w0) != 0.0
    smaller = pod_group(gang={"minCount": 1})
    smaller["metadata"]["resourceVersion"] = "5"
    put(controller.runtime, POD_GROUPS, smaller)
    assert controller.queue.due_in(w0) == 0.0
    await decide(controller, w0)
    assert released(client) == ["w0"]


async def test_a_basic_pod_group_is_no_gang() -> None:
    client = FakeClient()
    controller = group_cluster(client)
    put(controller.runtime, POD_GROUPS, pod_group(basic={}))
    w0 = group_member(controller, "w0")
    await decide(controller, w0)
    assert released(client) == ["w0"]
    assert told(client, "w0") == []


async def test_where_pod_groups_are_not_served_the_pod_is_allocated_alone_and_told_once() -> None:
    client = FakeClient()
    controller = group_cluster(client)
    controller.runtime.cache[POD_GROUPS].not_served = True
    w0 = group_member(controller, "w0")
    await decide(controller, w0)
    assert released(client) == ["w0"]
    [event] = [e for e in client.events if e["involved"]["metadata"]["name"] == "w0"]
    assert event["reason"] == gangdecision.REASON_POD_GROUP_NOT_SERVED
    assert "PodGroup" in event["message"] and GANG_ANNOTATION in event["message"]


async def test_members_of_one_name_by_annotation_and_by_pod_group_form_one_gang() -> None:
    """A gang annotation naming a PodGroup (what dralloc advised before it read PodGroups)
    joins the PodGroup's other pods."""
    client = FakeClient()
    controller = group_cluster(client)
    put(controller.runtime, POD_GROUPS, pod_group(gang={"minCount": 2}))
    w0 = group_member(controller, "w0", **{GANG_ANNOTATION: "workers", GANG_SIZE_ANNOTATION: "2"})
    group_member(controller, "w1")
    await decide(controller, w0)
    assert released(client) == ["w0", "w1"]


async def test_a_pod_group_policy_dralloc_cannot_follow_is_told() -> None:
    client = FakeClient()
    controller = group_cluster(client)
    put(controller.runtime, POD_GROUPS, pod_group(gang={"minCount": 5000}))
    w0 = group_member(controller, "w0")
    await decide(controller, w0)
    assert released(client) == []
    assert any("minCount 5000" in m for m in told(client, "w0"))


def test_a_pod_group_members_leaving_wakes_its_gang() -> None:
    def group_pod(gated: bool, phase: str = "Pending") -> Pod:
        raw = {
            "metadata": {"namespace": "ns", "name": "w0", "uid": "u", "resourceVersion": "1"},
            "spec": {
                "schedulingGroup": {"podGroupName": "workers"},
                "schedulingGates": [{"name": SCHEDULING_GATE}] if gated else [],
            },
            "status": {"phase": phase},
        }
        return parse_pod(raw)

    assert member_changed(group_pod(True), group_pod(False))
    assert member_changed(group_pod(True), None)
    assert not member_changed(group_pod(True), group_pod(True))
    assert not member_changed(group_pod(False), group_pod(False, "Running"))


async def test_every_gated_pod_of_a_pod_group_is_placed_or_none() -> None:
    """kube-scheduler (GenericWorkload) queues a PodGroup as one entity, gated while any of
    its pods is: releasing minCount of three members would leave their devices allocated to
    pods it never schedules. All three must fit, although minCount is 2."""
    client = FakeClient()
    controller = group_cluster(client, devices=2)
    put(controller.runtime, POD_GROUPS, pod_group(gang={"minCount": 2}))
    w0 = group_member(controller, "w0")
    group_member(controller, "w1")
    group_member(controller, "w2")
    await decide(controller, w0)
    assert released(client) == [] and not allocation_writes(client)
    [event] = [e for e in client.events if e["involved"]["metadata"]["name"] == "w0"]
    assert (
        'PodGroup "workers" (minCount 2, but all its gated members go together): at most 2 of'
    ) in event["message"], event["message"]
    assert "none of its pods is gated" in event["message"], event["message"]


async def test_an_annotated_gang_without_pod_groups_places_its_size_and_leaves_the_rest() -> None:
    client = FakeClient()
    controller = group_cluster(client, devices=2)
    keys = []
    for name in ("w0", "w1", "w2"):
        put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"c-{name}"))
        raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"c-{name}"}])
        raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: "2"}
        put(controller.runtime, PODS, raw)
        keys.append(Key("ns", name))
    await decide(controller, keys[0])
    assert released(client) == ["w0", "w1"]


# --- a member that leaves between the claim writes and the release ---------------------------


async def test_a_member_deleted_before_the_release_keeps_the_whole_gang_gated() -> None:
    """The user deletes one member after dralloc decided the gang, before it lifted any gate;
    the cache has not seen the deletion yet. The live read before the release finds it gone:
    no member is released (a gang of two running one pod is what gangs exist to prevent),
    and the members are decided again."""
    client = FakeClient()
    controller = group_cluster(client, devices=2)
    train_members(controller, {"w0": "c-w0", "w1": "c-w1"})
    del client.objects[PODS.path("ns", "w1")]  # deleted on the server, not yet in the cache
    await decide(controller, Key("ns", "w0"))
    assert len(allocation_writes(client)) == 2, "the gang was decided and its claims written"
    assert released(client) == [], "a member was released with the gang short"
    assert controller.queue.due_in(Key("ns", "w0")) == 0.0, "the gang is not decided again"
    # Once the cache sees the deletion, the member left holds nothing while it waits.
    controller.runtime.cache[PODS].apply("DELETED", pod("ns", "w1", []))
    await decide(controller, Key("ns", "w0"))
    left = client.objects[RESOURCE_CLAIMS.path("ns", "c-w0")]
    assert not (left.get("status") or {}).get("allocation"), "the waiting member holds a device"
    assert released(client) == []


async def test_a_member_deleted_while_the_gates_are_lifted_is_reported_on_the_others() -> None:
    """The live read found every member; one is deleted right after, before its own pod
    write (404). The gates are lifted at once, so the others are out already: the gang runs
    short, and each released member is told so, with what to do."""
    client = FakeClient()
    controller = group_cluster(client, devices=3)
    for name in ("w0", "w1", "w2"):
        put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"c-{name}"))
        raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"c-{name}"}])
        raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: "3"}
        put(controller.runtime, PODS, raw)

    def deleted_just_then(method: str, path: str, body: Any) -> Exception | None:
        if method in WRITES and path == PODS.path("ns", "w1"):
            return NotFound(404, "NotFound", 'pods "w1" not found', name="w1")
        return None

    client.fail = deleted_just_then
    await decide(controller, Key("ns", "w0"))
    assert released(client) == ["w0", "w2"], "the gates are lifted together"
    for name in ("w0", "w2"):
        (message,) = [m for m in told(client, name) if "runs short" in m]
        assert "gang ns/train: released without w1" in message, message
        assert "delete the gang's pods to run it whole again" in message


# --- the cost of a gang that waits for its members ------------------------------------------


async def decide_and_watch(controller: AllocationController, client: FakeClient, key: Key) -> None:
    """decide(), then the pod writes it made come back through the watch, as on a cluster."""
    seen = len(client.calls)
    await decide(controller, key)
    for call in client.calls[seen:]:
        if call.method in WRITES and call.path.startswith(PODS.path("ns") + "/"):
            written = call.path.removesuffix("/status").rsplit("/", 1)[1]
            stored = (
                apply_merge_patch(client.objects[PODS.path("ns", written)], call.body)
                if call.method == "PATCH"
                else copy.deepcopy(call.body)
            )
            stored["metadata"]["resourceVersion"] = str(10_000 + len(client.calls))
            client.objects[PODS.path("ns", written)] = stored
            controller.runtime.cache[PODS].apply("MODIFIED", stored)


async def test_a_member_that_comes_never_gated_wakes_its_waiting_gang() -> None:
    """PodGroup minCount 3: two GPU workers wait; the launcher (no claims, so never gated:
    counted as released) comes last. Its arrival must make the gang decide again; and the
    waiting gang keeps one member among the waiting pods with a retry, as a safety net."""
    client = FakeClient()
    controller, w0 = await two_of_three_waiting(client)
    assert w0 in controller.waiting and controller.queue.due_in(w0) is not None
    controller.queue._ready.clear()
    controller.queue._queued.clear()
    launcher = pod("ns", "launcher", [], gated=False)
    launcher["spec"]["schedulingGroup"] = {"podGroupName": "workers"}
    put(controller.runtime, PODS, launcher)
    assert controller.queue.due_in(w0) == 0.0, "the launcher's arrival did not wake the gang"
    await decide(controller, w0)
    assert released(client) == ["launcher", "w0", "w1"]


async def test_a_member_keeps_its_own_reason_while_its_gang_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """w1 names a claim that does not exist: that is what it is told, decision after
    decision, not the gang's reason over it."""
    monkeypatch.setattr(deciding, "EXPLAIN_GRACE", 0.0)  # told at once that it is missing
    client = FakeClient()
    controller = group_cluster(client)
    for name, claim_name in (("w0", "c-w0"), ("w1", "missing")):
        if claim_name != "missing":
            put(controller.runtime, RESOURCE_CLAIMS, claim("ns", claim_name))
        raw = pod("ns", name, [{"name": "dev", "resourceClaimName": claim_name}])
        raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "g", GANG_SIZE_ANNOTATION: "3"}
        put(controller.runtime, PODS, raw)
    for _ in range(3):
        await decide_and_watch(controller, client, Key("ns", "w0"))
    told_w1 = condition_messages(client, "w1")
    assert told_w1 and all("waits for its members" not in m for m in told_w1), told_w1
    assert any("waits for its members" in m for m in condition_messages(client, "w0"))


async def test_each_member_of_a_gang_too_small_yet_costs_one_condition_and_no_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hostile gang (size 1000, members arriving one by one): each arrival writes the
    newcomer's condition once and runs no node filter or search; no member's condition is
    written again (its words do not count members), and the gang's Event goes on one
    member. Before, every arrival rewrote every member's condition and posted an Event
    on each: quadratic in the members."""
    client = FakeClient()
    controller = group_cluster(client)
    filtered: list[Key] = []
    node_filter = controller.decider.candidates

    def counting(pod: Pod, entries: Any) -> Any:
        filtered.append(Key(pod.namespace, pod.name))
        return node_filter(pod, entries)

    monkeypatch.setattr(controller.decider, "candidates", counting)
    members = 40
    for index in range(members):
        name = f"w{index:03d}"
        put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"c-{name}"))
        raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"c-{name}"}])
        raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "big", GANG_SIZE_ANNOTATION: "1000"}
        put(controller.runtime, PODS, raw)
        await decide_and_watch(controller, client, Key("ns", name))
    assert filtered == []
    writes = [c.path for c in client.writes(PODS.path("ns") + "/")]
    assert sorted(writes) == sorted(set(writes)) and len(writes) == members, writes
    for index in (0, members - 1):
        [message] = condition_messages(client, f"w{index:03d}")
        assert "it is placed once 1000 are present" in message, message
    assert [e["involved"]["metadata"]["name"] for e in client.events] == ["w000", "c-w000"]


async def test_a_gang_larger_than_the_operators_limit_is_refused_naming_the_setting() -> None:
    client = FakeClient()
    controller = group_cluster(client, max_gang_size=8)
    keys = []
    for name in ("w0", "w1"):
        put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"c-{name}"))
        raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"c-{name}"}])
        raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "big", GANG_SIZE_ANNOTATION: "9"}
        put(controller.runtime, PODS, raw)
        keys.append(Key("ns", name))
    for key in keys:
        await decide(controller, key)
    for name in ("w0", "w1"):
        [message] = condition_messages(client, name)
        assert 'gang "big" needs 9 members placed together, more than the 8' in message
        assert "DRALLOC_MAX_GANG_SIZE" in message
    assert not allocation_writes(client)


def test_the_gang_size_limit_is_a_whole_number_up_to_what_dralloc_places() -> None:
    from operators.api.annotations import GANG_SIZE_MAX
    from operators.settings import Settings, SettingsError

    assert Settings().max_gang_size == GANG_SIZE_MAX
    for wrong in (0, GANG_SIZE_MAX + 1):
        with pytest.raises(SettingsError, match="max_gang_size"):
            Settings(max_gang_size=wrong)


@pytest.mark.parametrize("holds", [False, True], ids=["bypassed", "allocated"])
async def test_a_member_that_passed_the_gate_by_makes_up_the_size_only_with_its_devices(
    holds: bool,
) -> None:
    """Gang "train" of 3: w0 and w1 wait at the gate, w2 came without it (the webhook was
    away). With w2's claim not allocated for it, w2 holds nothing and is not allocated alone,
    so w0 and w1 released as "the rest of the gang" would run it short: they wait. With w2's
    claim allocated and reserved for it (kube-scheduler bound it), it counts."""
    client = FakeClient()
    controller = group_cluster(client)
    for name in ("w0", "w1", "w2"):
        raw_claim = claim("ns", f"c-{name}")
        if name == "w2" and holds:
            raw_claim = allocated(raw_claim, "w2", "uid-p-w2", device="dev-2")
        put(controller.runtime, RESOURCE_CLAIMS, raw_claim)
        raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"c-{name}"}])
        raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: "3"}
        if name == "w2":
            raw["spec"]["schedulingGates"] = []
        put(controller.runtime, PODS, raw)
    await decide(controller, Key("ns", "w0"))
    if holds:
        assert released(client) == ["w0", "w1", "w2"]
    else:
        assert released(client) == ["w2"], "the gang was released short of w2"
        assert not allocation_writes(client)
        assert any("waits for its members" in m for m in condition_messages(client, "w0"))


# --- a small gang with many members -------------------------------------------------------


async def test_a_small_gang_with_many_members_searches_a_few_and_tells_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gang of 2 with 40 gated members on a node of one device: the decision looks at the
    first 2 + GANG_SEARCH_EXTRA members' claims and node filters, not at all 40 (each arrival
    of a hostile gang's member would cost a search over all present). The searched members
    are told the gang's reason, the others that they wait behind them, in words that do not
    change with what the search finds (so its ups and downs rewrite 18 conditions, not 40)."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    names = [f"w{i:02d}" for i in range(40)]
    for name in names:
        put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"c-{name}"))
        raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"c-{name}"}])
        raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: "2"}
        put(controller.runtime, PODS, raw)
    looked_at: list[str] = []
    candidates = controller.decider.candidates

    def counted(member: Pod, entries: Any) -> Any:
        looked_at.append(member.name)
        return candidates(member, entries)

    monkeypatch.setattr(controller.decider, "candidates", counted)
    await sync(controller, Key("ns", "w00"))
    assert looked_at == names[: 2 + gangdecision.GANG_SEARCH_EXTRA]
    assert allocation_writes(client) == []
    searched = 2 + gangdecision.GANG_SEARCH_EXTRA
    for name in names[:searched]:
        said = condition_messages(client, name)[-1]
        assert said.startswith(
            f'gang "train" (the search looks at {searched} of its members at a time)'
        ), (name, said)
    for name in names[searched:]:
        said = condition_messages(client, name)[-1]
        assert said.startswith('gang "train": more of its members are gated than its search'), (
            name,
            said,
        )
    # The gang's Events go on its first member only.
    assert [name for name in names if messages(client, name)] == ["w00"]


async def test_a_member_holding_devices_is_searched_however_late_its_name() -> None:
    """A cut-short gang write left the last member by name (beyond the first 2 +
    GANG_SEARCH_EXTRA) holding the only device while the gang cannot fit: it is searched all
    the same, so what it holds is given back instead of staying held while the gang waits."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    names = [f"w{i:02d}" for i in range(40)]
    for name in names:
        raw_claim = claim("ns", f"c-{name}")
        if name == names[-1]:
            raw_claim = allocated(raw_claim, name, f"uid-{name}")
        put(controller.runtime, RESOURCE_CLAIMS, raw_claim)
        raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"c-{name}"}])
        raw["metadata"]["uid"] = f"uid-{name}"
        raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: "3"}
        put(controller.runtime, PODS, raw)
    await sync(controller, Key("ns", "w00"))
    held = client.objects[RESOURCE_CLAIMS.path("ns", f"c-{names[-1]}")]
    assert not (held.get("status") or {}).get("allocation"), "the late member still holds"


# --- arrivals to a gang that waits for its members ----------------------------------------


def waiting_member(controller: AllocationController, name: str, size: str = "10") -> Key:
    put(controller.runtime, RESOURCE_CLAIMS, claim("ns", f"c-{name}"))
    raw = pod("ns", name, [{"name": "dev", "resourceClaimName": f"c-{name}"}])
    raw["metadata"]["uid"] = f"uid-{name}"
    raw["metadata"]["annotations"] |= {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: size}
    put(controller.runtime, PODS, raw)
    return Key("ns", name)


def count_claim_looks(
    controller: AllocationController, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    looked: list[str] = []
    resolve = controller.decider.resolve_claims

    def counted(member: Pod) -> Any:
        looked.append(member.name)
        return resolve(member)

    monkeypatch.setattr(controller.decider, "resolve_claims", counted)
    return looked


async def test_a_newcomer_to_a_waiting_gang_costs_a_look_at_itself_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gang of 10 waits with 5 members: after one look at all of them, each newcomer is
    told what the gang was told without a look at the others (a thousand arrivals would
    cost half a million looks). Departures end that: the next decision looks at all again."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    for index in range(5):
        waiting_member(controller, f"w{index}")
    looked = count_claim_looks(controller, monkeypatch)
    await decide(controller, Key("ns", "w0"))
    assert sorted(looked) == ["w0", "w1", "w2", "w3", "w4"]
    looked.clear()
    for index in range(5, 9):
        await decide(controller, waiting_member(controller, f"w{index}"))
    assert looked == ["w5", "w6", "w7", "w8"]
    for index in range(9):
        assert condition_messages(client, f"w{index}")[-1].startswith(
            'gang "train" waits for its members: it is placed once 10 are present'
        ), index
    # A gated member leaves: the gang was told nothing that changes, nor holds anything.
    while len(controller.queue):
        controller.queue.done(await controller.queue.get())
    controller.runtime.cache[PODS].apply("DELETED", pod("ns", "w3", []))
    assert len(controller.queue) == 0
    # A launcher comes (never gated, no claims: it counts as released): one gated member is
    # requeued, and its decision looks at all of them.
    launcher = pod("ns", "launcher", [], gated=False)
    launcher["metadata"]["annotations"] = {GANG_ANNOTATION: "train", GANG_SIZE_ANNOTATION: "10"}
    put(controller.runtime, PODS, launcher)
    requeued = [await controller.queue.get() for _ in range(len(controller.queue))]
    assert len(requeued) == 1, requeued
    looked.clear()
    await decide(controller, requeued[0])
    assert sorted(looked) == ["w0", "w1", "w2", "w4", "w5", "w6", "w7", "w8"]


async def test_members_deleted_together_hand_the_gangs_events_to_the_first_left_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gang's Events are on w0 only. w0, w1 and w2 go at once (deleted in name order, as
    a namespace's pods are): the others are not decided again, but the first left, w3, is
    told in Events, once, and carries them from then on."""
    monkeypatch.setattr(gangdecision, "HANDOVER_DELAY_S", 0.0)
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    for index in range(6):
        waiting_member(controller, f"w{index}")
    await decide(controller, Key("ns", "w0"))
    carriers = {e["involved"]["metadata"]["name"] for e in client.events}
    assert carriers == {"w0", "c-w0"}, carriers
    looked = count_claim_looks(controller, monkeypatch)
    writes = len(client.writes(PODS.path("ns") + "/"))
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        for name in ("w0", "w1", "w2"):
            controller.runtime.cache[PODS].apply("DELETED", pod("ns", name, []))
    told = [e["involved"]["metadata"]["name"] for e in client.events]
    assert told.count("w3") == 1 and "w4" not in told and "w5" not in told, told
    assert looked == [] and len(client.writes(PODS.path("ns") + "/")) == writes
    assert controller.gangs_told[("ns", "train")].carrier == Key("ns", "w3")
    # The carrier leaves again: the next one takes over.
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        controller.runtime.cache[PODS].apply("DELETED", pod("ns", "w3", []))
    assert [e["involved"]["metadata"]["name"] for e in client.events].count("w4") == 1


async def test_a_carrier_gone_during_the_looks_writes_is_replaced_by_the_next_one_looked_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """w0, the member the look chose to carry the gang's Events, is deleted while the look
    still writes the others' conditions (no record of the gang yet, so no handover is
    asked for): the next member decided takes the Events over."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    for index in range(6):
        waiting_member(controller, f"w{index}")
    explain = controller.reporter.explain

    async def w0_goes_meanwhile(member: Pod, reason: Any, **options: Any) -> None:
        if member.name == "w3":
            controller.runtime.cache[PODS].apply("DELETED", pod("ns", "w0", []))
        await explain(member, reason, **options)

    monkeypatch.setattr(controller.reporter, "explain", w0_goes_meanwhile)
    await decide(controller, Key("ns", "w1"))
    monkeypatch.setattr(controller.reporter, "explain", explain)
    await decide(controller, Key("ns", "w1"))
    told = [e["involved"]["metadata"]["name"] for e in client.events]
    assert "w1" in told, told
    assert controller.gangs_told[("ns", "train")].carrier == Key("ns", "w1")


async def test_the_handed_over_events_say_what_the_carrier_was_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gang searched without fitting, with members behind the search: the member that
    takes the Events over is told the search's reason, not the words for those behind."""
    monkeypatch.setattr(gangdecision, "HANDOVER_DELAY_S", 0.0)
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    for index in range(40):
        waiting_member(controller, f"w{index:02d}", size="2")
    await decide(controller, Key("ns", "w00"))
    first = [e["message"] for e in client.events if e["involved"]["metadata"]["name"] == "w00"]
    assert first and "waits behind" not in first[0], first
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        controller.runtime.cache[PODS].apply("DELETED", pod("ns", "w00", []))
    handed = [e["message"] for e in client.events if e["involved"]["metadata"]["name"] == "w01"]
    assert handed == first, (handed, first)


async def test_a_newcomer_behind_a_searched_gang_that_did_not_fit_looks_at_itself_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gang of 2 with 40 members on a node of one device did not fit: its search looked at
    the first 18 by name. A newcomer that sorts after them would not be searched either: it
    is told the gang's reason with a look at itself only. One that sorts among them is
    decided with the gang. The member that stands for the gang leaving hands that on."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    for index in range(40):
        waiting_member(controller, f"w{index:02d}", size="2")
    looked = count_claim_looks(controller, monkeypatch)
    await decide(controller, Key("ns", "w00"))
    searched = 2 + gangdecision.GANG_SEARCH_EXTRA
    assert len(looked) == searched
    reason = condition_messages(client, "w00")[-1]
    assert "at most 1 of the gang" in reason, reason
    looked.clear()
    for index in range(40, 44):
        await decide(controller, waiting_member(controller, f"w{index:02d}", size="2"))
    assert looked == ["w40", "w41", "w42", "w43"]
    assert condition_messages(client, "w43")[-1] == condition_messages(client, "w39")[-1]
    assert "waits behind the first by name" in condition_messages(client, "w43")[-1]
    looked.clear()
    await decide(controller, waiting_member(controller, "a00", size="2"))
    assert len(looked) == searched and looked[0] == "a00", looked
    # The member that stands for the gang among the waiting pods (the first by name) leaves:
    # another gated one stands in, and nobody decides again.
    while len(controller.queue):
        controller.queue.done(await controller.queue.get())
    assert Key("ns", "a00") in controller.waiting
    controller.waiting.intersection_update({Key("ns", "a00")})  # it alone stands for the gang
    controller.runtime.cache[PODS].apply("DELETED", pod("ns", "a00", []))
    assert len(controller.queue) == 0
    assert any(key.name.startswith("w") for key in controller.waiting), controller.waiting


async def test_members_left_out_are_told_without_counts_and_one_stands_for_them() -> None:
    """A gang of 2 with 5 members on a node of 2 devices: 2 are placed, and the 3 left out
    are told why in words that count nobody (so later placements do not rewrite them all),
    with Events on the first of them only; one of them stands for the gang among the pods
    cluster changes wake (its decision places the others too)."""
    client = FakeClient()
    controller = group_cluster(client, devices=2)
    for index in range(5):
        waiting_member(controller, f"w{index}", size="2")
    await decide(controller, Key("ns", "w0"))
    assert released(client) == ["w0", "w1"]
    words = 'gang "train": members were placed as they fit; this one waits for room'
    for name in ("w2", "w3", "w4"):
        assert condition_messages(client, name)[-1] == words, name
    assert [bool(told(client, name)) for name in ("w2", "w3", "w4")] == [True, False, False]
    assert {key.name for key in controller.waiting} & {"w2", "w3", "w4"} == {"w2"}


async def test_the_members_behind_a_search_are_told_in_the_background() -> None:
    """Telling thousands of members behind a search is not the decision's work: the sync
    returns before any of them is written (the allocation worker goes on with other
    namespaces), and the writers' task tells them all."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    names = [f"w{i:02d}" for i in range(40)]
    for name in names:
        waiting_member(controller, name, size="2")
    searched = 2 + gangdecision.GANG_SEARCH_EXTRA
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        await controller.sync(Key("ns", "w00"))
        assert [n for n in names[searched:] if condition_messages(client, n)] == []
        assert all(condition_messages(client, n) for n in names[:searched])
    for name in names[searched:]:
        assert "waits behind the first by name" in condition_messages(client, name)[-1], name
    assert controller.gangs_telling == {}


async def test_a_later_decision_with_nobody_behind_stops_the_telling_still_going_on() -> None:
    """Members told they wait behind, by a task still writing, came into the search since
    (others left): the gang's next decision, with nobody behind, stops that task, which
    would otherwise overwrite the reason the searched members were just given."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    members = [
        parse_pod(client.objects[PODS.path("ns", waiting_member(controller, f"w{i}").name)])
        for i in range(3)
    ]
    gang = GangRef("train", 2)
    async with asyncio.TaskGroup() as writers:
        controller.commits.writers = writers
        await gangdecision._tell_behind(controller, "ns", gang, members)
        telling = controller.gangs_telling[("ns", "train")]
        await gangdecision._tell_behind(controller, "ns", gang, [])
    assert telling.cancelled()
    assert [m.name for m in members if condition_messages(client, m.name)] == []


async def test_a_failed_write_to_one_member_behind_leaves_the_others_told() -> None:
    """The API server refuses one member's condition write (503): the others behind the
    search are told all the same, and nothing escapes the writers' scope."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    names = [f"w{i:02d}" for i in range(40)]
    for name in names:
        waiting_member(controller, name, size="2")
    unlucky = names[-1]

    def fail(method: str, path: str, body: Any) -> Exception | None:
        if method in WRITES and path.startswith(PODS.path("ns", unlucky)):
            return ApiError(503, "ServiceUnavailable", "unavailable")
        return None

    client.fail = fail
    await decide(controller, Key("ns", "w00"))
    searched = 2 + gangdecision.GANG_SEARCH_EXTRA
    # Every member behind was written to; only the unlucky one's write failed.
    assert [n for n in names[searched:] if condition_messages(client, n)] == names[searched:]
    assert controller.gangs_telling == {}


async def test_a_new_term_looks_at_every_gang_again() -> None:
    """What a gang's members were told in an earlier term (its Events above all) may not
    have landed: leading anew, the controller forgets it, so that its next look tells them
    again (the recorder drops the Events that did land)."""
    client = FakeClient()
    controller = AllocationController(one_device_cluster(client))
    for index in range(2):
        waiting_member(controller, f"w{index}")
    await decide(controller, Key("ns", "w0"))
    earlier = controller.gangs_told[("ns", "train")]
    running = asyncio.create_task(controller.run())
    await asyncio.sleep(0)
    assert controller.gangs_told.get(("ns", "train")) is not earlier
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
