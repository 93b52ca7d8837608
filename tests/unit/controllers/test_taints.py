"""The device-taint eviction controller against a fake API server: the rate limit, cancelled
evictions, pods replaced or being deleted meanwhile, the DeviceTaintRule status throttle, and
Events instead of a status where the served rule has none."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest

from operators.cache.informer import Key
from operators.controllers import taints
from operators.controllers.taints import (
    REASON_EVICTION,
    RULE_STATUS_PERIOD,
    EvictionRateLimiter,
    TaintController,
)
from operators.controllers.workqueue import WorkQueue
from operators.kube import (
    DEVICE_TAINT_RULES,
    DISRUPTION_BUDGET_CAUSE,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ApiError,
    JsonDict,
)
from operators.settings import EvictionMode

from .fakes import (
    DRIVER,
    Call,
    FakeClient,
    allocated,
    claim,
    one_device_cluster,
    pod,
    put,
    resource_slice,
)

NO_EXECUTE = {"key": "broken", "value": "yes", "effect": "NoExecute"}


def tainted_slice(devices: int, *, taint: bool = True, rv: str = "2") -> JsonDict:
    raw = resource_slice("n1", devices)
    raw["metadata"]["resourceVersion"] = rv
    if taint:
        for device in raw["spec"]["devices"]:
            device["taints"] = [NO_EXECUTE]
    return raw


def bound_pod(
    name: str, device: str, *, toleration_seconds: int | None = None
) -> tuple[JsonDict, JsonDict]:
    """A pod running on n1 and its claim, allocated ``device`` and reserved for it."""
    raw_claim = allocated(claim("ns", f"{name}-claim"), name, f"uid-p-{name}", device)
    if toleration_seconds is not None:
        toleration = {**NO_EXECUTE, "operator": "Equal", "tolerationSeconds": toleration_seconds}
        raw_claim["status"]["allocation"]["devices"]["results"][0]["tolerations"] = [toleration]
    raw_pod = pod("ns", name, [{"name": "dev", "resourceClaimName": f"{name}-claim"}], gated=False)
    raw_pod["spec"]["nodeName"] = "n1"
    raw_pod["status"] = {"phase": "Running"}
    return raw_pod, raw_claim


def cluster(client: FakeClient, pods: int, **settings: Any) -> tuple[TaintController, Any]:
    runtime = one_device_cluster(client, **settings)
    runtime.cache[RESOURCE_SLICES].apply("MODIFIED", tainted_slice(pods))
    controller = TaintController(runtime)
    for i in range(pods):
        raw_pod, raw_claim = bound_pod(f"p{i}", f"dev-{i}")
        put(runtime, RESOURCE_CLAIMS, raw_claim)
        put(runtime, PODS, raw_pod)
    controller.queue = WorkQueue()  # what the handlers queued is run by hand here
    return controller, runtime


def deletes(client: FakeClient) -> list[str]:
    return [c.path for c in client.calls if c.method == "DELETE"]


# --- the eviction rate limit --------------------------------------------------------------


def test_rate_limiter_counts_a_sliding_minute() -> None:
    now = [0.0]
    limiter = EvictionRateLimiter(2, clock=lambda: now[0])
    assert limiter.wait_time() == 0.0
    now[0] = 10.0
    assert limiter.wait_time() == 0.0
    now[0] = 15.0
    assert limiter.wait_time() == pytest.approx(45.0)  # the first one leaves the minute at 60
    assert limiter.wait_time() == pytest.approx(45.0)  # asking is not counted
    now[0] = 60.0
    assert limiter.wait_time() == 0.0
    assert limiter.wait_time() == pytest.approx(10.0)
    unlimited = EvictionRateLimiter(0, clock=lambda: now[0])
    assert all(unlimited.wait_time() == 0.0 for _ in range(100))


def test_a_refused_eviction_gives_its_slot_back() -> None:
    clock = [0.0]
    limiter = EvictionRateLimiter(1, clock=lambda: clock[0])
    assert limiter.wait_time() == 0.0
    limiter.refund()  # the budget refused it: nothing was evicted
    assert limiter.wait_time() == 0.0
    assert limiter.wait_time() > 0.0


async def test_evictions_past_the_rate_limit_wait_their_turn() -> None:
    client = FakeClient()
    controller, _ = cluster(client, 3, max_evictions_per_minute=2)
    for i in range(3):
        await controller.sync(Key("ns", f"p{i}"))
    assert deletes(client) == [PODS.path("ns", "p0"), PODS.path("ns", "p1")]
    assert controller.evictions == 2
    later = controller.queue.due_in(Key("ns", "p2"))
    assert later is not None and 50.0 < later <= 60.0
    assert Key("ns", "p2") in controller.scheduled  # still due, only later


class BudgetGuarded(FakeClient):
    """Evictions of ``protected`` pods are refused by a disruption budget, once ``answer`` is
    set: until then they are in flight."""

    def __init__(self, protected: set[str]) -> None:
        super().__init__()
        self.protected = protected
        self.answer = asyncio.Event()

    async def request(self, method: str, path: str, **kwargs: Any) -> JsonDict:
        if path.endswith("/eviction") and path.split("/")[-2] in self.protected:
            await self.answer.wait()
            self.calls.append(Call(method, path, kwargs.get("body")))
            raise ApiError(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                causes=("The disruption budget pdb needs 1 healthy pods",),
                cause_reasons=(DISRUPTION_BUDGET_CAUSE,),
            )  # fmt: skip
        return await super().request(method, path, **kwargs)


async def test_a_slot_held_by_an_eviction_a_budget_refuses_is_free_at_once_for_the_next() -> None:
    """With one eviction a minute: a protected pod's attempt is in flight when a free pod
    asks, so the free pod must wait; the budget refuses, and the free pod goes at once, not a
    minute later (the slot was never used)."""
    client = BudgetGuarded({"p0"})
    controller, _ = cluster(client, 2, max_evictions_per_minute=1, eviction_mode=EvictionMode.EVICT)
    protected = asyncio.create_task(controller.sync(Key("ns", "p0")))
    await asyncio.sleep(0)  # its eviction is in flight, its slot taken
    await controller.sync(Key("ns", "p1"))
    assert controller.queue.due_in(Key("ns", "p1")) == pytest.approx(60.0, abs=1.0)
    client.answer.set()
    await protected
    assert controller.queue.due_in(Key("ns", "p1")) == 0.0  # woken by the slot given back
    await controller.sync(Key("ns", "p1"))
    assert controller.evictions == 1
    evicted = [c.path for c in client.calls if c.path.endswith("/eviction")]
    assert evicted == [PODS.path("ns", "p0") + "/eviction", PODS.path("ns", "p1") + "/eviction"]


async def test_an_eviction_the_api_server_refuses_uses_no_slot() -> None:
    """With one eviction a minute: the first pod's eviction is refused (its namespace is being
    deleted), which is no eviction, so the next pod goes at once; an attempt that got no answer
    (it may have happened) keeps its slot."""
    terminating = ApiError(403, "Forbidden", "namespace ns is being terminated")
    for mode in (EvictionMode.EVICT, EvictionMode.DELETE):
        client = FakeClient()
        controller, _ = cluster(client, 3, max_evictions_per_minute=1, eviction_mode=mode)
        client.fail = lambda method, path, _body: (
            terminating if method != "GET" and "/p0" in path and "events" not in path else None
        )
        with pytest.raises(ApiError):
            await controller.sync(Key("ns", "p0"))
        await controller.sync(Key("ns", "p1"))
        assert controller.evictions == 1, mode
        # No answer, or a 5xx (the eviction may have been applied before it): the slot stays.
        for unknown in (TimeoutError(), ApiError(504, "Timeout", "the server timed out")):
            controller.limiter.recent.clear()
            client.fail = lambda method, path, _body, e=unknown: (  # type: ignore[misc]
                e if method != "GET" and "/p1" in path and "events" not in path else None
            )
            with pytest.raises(type(unknown)):
                await controller.sync(Key("ns", "p1"))
            await controller.sync(Key("ns", "p2"))
            due = controller.queue.due_in(Key("ns", "p2"))
            assert due is not None and due > 50.0, (mode, unknown, due)


async def test_an_eviction_that_found_its_pod_gone_uses_no_slot() -> None:
    client = FakeClient()
    controller, _ = cluster(client, 2, max_evictions_per_minute=1)
    del client.objects[PODS.path("ns", "p0")]
    await controller.sync(Key("ns", "p0"))
    await controller.sync(Key("ns", "p1"))
    assert deletes(client) == [PODS.path("ns", "p1")]


# --- cancelling a pending eviction --------------------------------------------------------


async def test_a_pending_eviction_is_cancelled_with_an_event_when_the_taint_goes() -> None:
    client = FakeClient()
    runtime = one_device_cluster(client)
    runtime.cache[RESOURCE_SLICES].apply("MODIFIED", tainted_slice(1))
    controller = TaintController(runtime)
    raw_pod, raw_claim = bound_pod("p0", "dev-0", toleration_seconds=300)
    put(runtime, RESOURCE_CLAIMS, raw_claim)
    put(runtime, PODS, raw_pod)
    controller.queue = WorkQueue()
    key = Key("ns", "p0")
    await controller.sync(key)
    assert key in controller.scheduled and not deletes(client)
    due = controller.queue.due_in(key)
    assert due is not None and 290.0 < due <= 300.0
    runtime.cache[RESOURCE_SLICES].apply("MODIFIED", tainted_slice(1, taint=False, rv="3"))
    await controller.sync(key)
    assert key not in controller.scheduled and not deletes(client)
    (event,) = client.events
    assert (event["reason"], event["message"]) == (REASON_EVICTION, "Cancelling deletion")
    assert event["involved"]["metadata"]["uid"] == "uid-p-p0"


async def test_no_cancelling_event_for_a_pod_replaced_or_being_deleted() -> None:
    for change in ({"uid": "uid-new"}, {"deletionTimestamp": "2026-01-01T00:00:00Z"}):
        client = FakeClient()
        runtime = one_device_cluster(client)
        runtime.cache[RESOURCE_SLICES].apply("MODIFIED", tainted_slice(1))
        controller = TaintController(runtime)
        raw_pod, raw_claim = bound_pod("p0", "dev-0", toleration_seconds=300)
        put(runtime, RESOURCE_CLAIMS, raw_claim)
        put(runtime, PODS, raw_pod)
        key = Key("ns", "p0")
        await controller.sync(key)
        assert key in controller.scheduled
        raw_pod["metadata"] = {**raw_pod["metadata"], **change, "resourceVersion": "6"}
        runtime.cache[PODS].apply("MODIFIED", raw_pod)
        await controller.sync(key)
        assert key not in controller.scheduled, change
        assert not client.events, change
        assert not deletes(client), change


# --- pods replaced or being deleted before the delete -------------------------------------


@pytest.mark.parametrize(
    "live",
    [
        {"uid": "uid-other"},  # a new pod of the same name
        {"deletionTimestamp": "2026-01-01T00:00:00Z"},  # already being deleted
        None,  # gone
    ],
)
async def test_a_pod_replaced_deleting_or_gone_is_not_evicted(live: JsonDict | None) -> None:
    client = FakeClient()
    controller, _ = cluster(client, 1)
    path = PODS.path("ns", "p0")
    if live is None:
        del client.objects[path]
    else:
        client.objects[path]["metadata"].update(live)
    await controller.sync(Key("ns", "p0"))
    assert [c.method for c in client.calls] == ["GET"]  # the live read only
    assert not client.events and controller.evictions == 0


async def test_a_pod_still_there_is_marked_and_deleted_with_its_uid() -> None:
    client = FakeClient()
    controller, _ = cluster(client, 1)
    await controller.sync(Key("ns", "p0"))
    path = PODS.path("ns", "p0")
    assert [(c.method, c.path) for c in client.calls] == [
        ("GET", path),
        ("POST", "/api/v1/namespaces/ns/events"),
        ("PATCH", path + "/status"),
        ("DELETE", path),
    ]
    assert client.calls[2].body["metadata"] == {"uid": "uid-p-p0"}
    assert client.events[0]["message"] == "Marking for deletion"


# --- the DeviceTaintRule status throttle --------------------------------------------------


def taint_rule() -> JsonDict:
    return {
        "apiVersion": f"{DEVICE_TAINT_RULES.group}/{DEVICE_TAINT_RULES.version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "r", "uid": "uid-r", "resourceVersion": "1", "generation": 1},
        "spec": {
            "deviceSelector": {"driver": DRIVER},
            "taint": {"key": "k", "value": "v", "effect": "NoExecute"},
        },
    }


class _Stop(Exception):
    pass


async def run_status_loop(
    monkeypatch: Any, controller: TaintController, seconds: int, *, busy: bool = True
) -> None:
    """The rule-status loop for ``seconds`` of a fake clock; with ``busy`` the rule is marked
    changed every second with a new message (one more pod evicted)."""
    clock = [0.0]

    async def sleep(delay: float) -> None:
        if clock[0] >= seconds:
            raise _Stop
        clock[0] += delay
        if busy:
            controller.evicted_by_rule["r"] += 1
        controller._mark_rules(frozenset({"r"}))
        await asyncio.sleep(0)

    monkeypatch.setattr(taints, "asyncio", types.SimpleNamespace(sleep=sleep))
    monkeypatch.setattr(taints, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    with pytest.raises(_Stop):
        await controller._rule_status_loop()


async def test_rule_status_is_written_at_most_once_per_period(monkeypatch: Any) -> None:
    """The rule is marked changed every second (a busy eviction): its status is written when
    first changed and then once per RULE_STATUS_PERIOD, not once a second."""
    client = FakeClient()
    runtime = one_device_cluster(client)
    put(runtime, DEVICE_TAINT_RULES, taint_rule())
    controller = TaintController(runtime)
    seconds = 25
    await run_status_loop(monkeypatch, controller, seconds)
    writes = client.writes(DEVICE_TAINT_RULES.path(None, "r") + "/status")
    assert len(writes) == 1 + (seconds - 1) // int(RULE_STATUS_PERIOD)  # at 1, 11, 21
    assert "r" in controller._rules_dirty  # the latest change still to be written


def served_without_status(runtime: Any) -> None:
    """The server serves DeviceTaintRules only at v1alpha3 (Kubernetes 1.34): no status."""
    informer = runtime.cache[DEVICE_TAINT_RULES]
    informer._version = informer.versions.index("v1alpha3")


async def test_a_rule_without_status_gets_its_condition_as_events(monkeypatch: Any) -> None:
    """No PATCH to a status subresource that does not exist (a 404 once a second); each new
    reason or message becomes one Event on the rule, at most once per RULE_STATUS_PERIOD."""
    client = FakeClient()
    runtime = one_device_cluster(client)
    put(runtime, DEVICE_TAINT_RULES, taint_rule())
    served_without_status(runtime)
    controller = TaintController(runtime)
    await run_status_loop(monkeypatch, controller, 25)
    assert not client.writes("/status")
    assert [e["message"] for e in client.events] == [
        "1 pod evicted since starting the controller.",
        "11 pods evicted since starting the controller.",
        "21 pods evicted since starting the controller.",
    ]
    first = client.events[0]
    assert first["reason"] == "Completed"
    assert first["involved"]["kind"] == "DeviceTaintRule"
    assert first["involved"]["apiVersion"].endswith("/v1alpha3")
    assert first["involved"]["metadata"]["uid"] == "uid-r"


async def test_a_rule_without_status_is_not_told_the_same_twice(monkeypatch: Any) -> None:
    client = FakeClient()
    runtime = one_device_cluster(client)
    put(runtime, DEVICE_TAINT_RULES, taint_rule())
    served_without_status(runtime)
    controller = TaintController(runtime)
    await run_status_loop(monkeypatch, controller, 25, busy=False)
    assert [e["message"] for e in client.events] == [
        "0 pods evicted since starting the controller."
    ]


@pytest.mark.parametrize(
    ("served", "to_status"),
    [
        (frozenset({"devicetaintrules", "devicetaintrules/status"}), True),  # 1.35
        (frozenset({"devicetaintrules"}), False),  # 1.34
    ],
)
async def test_discovery_decides_whether_a_v1alpha3_rule_has_a_status(
    monkeypatch: Any, served: frozenset[str], to_status: bool
) -> None:
    """Kubernetes 1.35 serves v1alpha3 rules with a status subresource, 1.34 without: what
    discovery says wins over the versions known to lack one."""
    client = FakeClient()
    client.subresources["v1alpha3"] = served
    runtime = one_device_cluster(client)
    put(runtime, DEVICE_TAINT_RULES, taint_rule())
    served_without_status(runtime)
    controller = TaintController(runtime)
    await run_status_loop(monkeypatch, controller, 5, busy=False)
    assert bool(client.writes("/status")) is to_status
    assert bool(client.events) is not to_status
