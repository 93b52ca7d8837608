"""Leader election: the pure decision and a full round against a fake Lease API."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from operators.kube import ApiError, Conflict, NotFound
from operators.leader import (
    POD_NAME_EXTRA,
    LeaderElector,
    LeaseRecord,
    LeaseUnusable,
    Observation,
    decide,
    default_identity,
    identity_for,
)


def record(holder: str, duration: float = 10.0) -> LeaseRecord:
    return LeaseRecord(holder, duration, "t0", "t1", 0)


def test_decide() -> None:
    assert decide("me", Observation(), now=0.0)
    held = Observation()
    held.see(record("other"), now=100.0)
    assert not decide("me", held, now=105.0)  # renewed 5 s ago, lease is 10 s
    assert decide("me", held, now=110.0)  # not renewed for the whole lease duration
    mine = Observation()
    mine.see(record("me"), now=100.0)
    assert decide("me", mine, now=100.5)
    released = Observation()
    released.see(record(""), now=100.0)
    assert decide("me", released, now=100.0)


def test_observation_only_changes_on_new_record() -> None:
    seen = Observation()
    seen.see(record("other"), now=1.0)
    seen.see(record("other"), now=9.0)  # same record again: the clock keeps running
    assert seen.changed_at == 1.0


class FakeLeases:
    """One Lease with resourceVersion checks, as the API server does."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0

    async def get(self, resource: Any, name: str, namespace: str) -> dict[str, Any]:
        if self.lease is None:
            raise NotFound(404, "NotFound", name)
        return copy.deepcopy(self.lease)

    async def create(self, resource: Any, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        if self.lease is not None:
            raise Conflict(409, "AlreadyExists", "")
        return self._store(body)

    async def replace(self, resource: Any, body: dict[str, Any]) -> dict[str, Any]:
        assert self.lease is not None
        if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", "stale")
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)


async def test_two_candidates_one_leader_then_takeover() -> None:
    api = FakeLeases()
    clock = [0.0]

    def elector(identity: str) -> LeaderElector:
        return LeaderElector(
            api,  # type: ignore[arg-type]
            name="l", namespace="ns", identity=identity,
            lease_duration=10, renew_deadline=5, retry_period=1,
            clock=lambda: clock[0],
        )  # fmt: skip

    a, b = elector("a"), elector("b")
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    clock[0] = 5.0
    assert await a.try_acquire_or_renew()  # renewal
    assert not await b.try_acquire_or_renew()
    clock[0] = 14.0  # b saw the renewal at 5.0; 9 s < 10 s
    assert not await b.try_acquire_or_renew()
    clock[0] = 15.5
    assert await b.try_acquire_or_renew()
    assert api.lease is not None
    assert api.lease["spec"]["holderIdentity"] == "b"
    assert api.lease["spec"]["leaseTransitions"] == 1
    clock[0] = 16.0
    assert not await a.try_acquire_or_renew()  # the old leader sees b now


class LeaseApi:
    """Answers the preflight's read and dry-run write the way a given cluster would."""

    def __init__(self, *, read: Exception | None = None, write: Exception | None = None,
                 exists: bool = False) -> None:  # fmt: skip
        self.read, self.write, self.exists = read, write, exists
        self.calls: list[tuple[str, str, dict[str, str] | None]] = []

    async def get(self, resource: Any, name: str, namespace: str) -> dict[str, Any]:
        self.calls.append(("GET", resource.path(namespace, name), None))
        if self.read is not None:
            raise self.read
        if not self.exists:
            raise NotFound(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "7"}}

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method, path, kwargs.get("params")))
        if self.write is not None:
            raise self.write
        return {}


def preflight_elector(api: LeaseApi) -> LeaderElector:
    return LeaderElector(
        api, name="dralloc-operator", namespace="dralloc-system", identity="me",  # type: ignore[arg-type]
        retry_period=0.01,
    )  # fmt: skip


async def test_preflight_passes_with_dry_runs_only() -> None:
    for exists, method in ((False, "POST"), (True, "PUT")):
        api = LeaseApi(exists=exists)
        await preflight_elector(api).preflight()
        [(read, _, _), (write, _, params)] = api.calls
        assert (read, write, params) == ("GET", method, {"dryRun": "All"})


@pytest.mark.parametrize(
    ("api", "problem"),
    [
        (
            LeaseApi(write=NotFound(404, "NotFound", 'namespaces "dralloc-system" not found')),
            'namespace "dralloc-system" does not exist',
        ),
        (
            LeaseApi(
                read=ApiError(403, "Forbidden", 'leases.coordination.k8s.io "x" is forbidden')
            ),
            "forbidden",
        ),
        (
            LeaseApi(exists=True, write=ApiError(403, "Forbidden", "cannot update")),
            "forbidden",
        ),
    ],
    ids=["no-namespace", "no-get", "no-update"],
)
async def test_preflight_names_the_lease_and_the_rbac_needed(api: LeaseApi, problem: str) -> None:
    with pytest.raises(LeaseUnusable) as caught:
        await preflight_elector(api).preflight()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        "cannot use the leader-election Lease dralloc-system/dralloc-operator: "
    )
    assert problem in message
    assert (
        "get, create and update on leases.coordination.k8s.io in namespace dralloc-system"
        in message
    )
    assert "--lease-namespace" in message


async def test_preflight_waits_out_an_unavailable_api_server() -> None:
    api = LeaseApi(read=ApiError(503, "ServiceUnavailable", "starting"))
    elector = preflight_elector(api)
    task = asyncio.create_task(elector.preflight())
    await asyncio.sleep(0.05)
    assert not task.done() and len(api.calls) >= 2
    api.read = None
    await asyncio.wait_for(task, 1)


def test_the_default_identity_is_the_name_the_fencing_policy_knows() -> None:
    """A pod-bound token: the pod's name (what the policy compares with the holder); a user's
    credentials: the user, a slash, this process; nothing said: the process alone."""
    pod = {"username": "system:serviceaccount:dralloc-system:dralloc-operator",
           "extra": {POD_NAME_EXTRA: ["dralloc-operator-7d9f-x2"]}}  # fmt: skip
    assert identity_for(pod, "host-1") == "dralloc-operator-7d9f-x2"
    assert identity_for({"username": "alice", "extra": {}}, "host-1") == "alice/host-1"
    assert identity_for({}, "host-1") == "host-1"


class Reviews:
    def __init__(self, *answers: dict[str, Any] | Exception) -> None:
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []

    async def create(self, resource: Any, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(body)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_the_default_identity_asks_the_api_server_who_we_are() -> None:
    answer = {"status": {"userInfo": {"username": "alice"}}}
    reviews = Reviews(answer)
    assert await default_identity(reviews, "host-1") == "alice/host-1"  # type: ignore[arg-type]
    assert reviews.asked[0]["kind"] == "SelfSubjectReview"


async def test_the_default_identity_waits_for_an_answer_rather_than_guess() -> None:
    """A guess while the API server is away would be a name the fencing policy never
    accepts, for the life of the process; a refusal is an answer (the process name, told)."""
    down = ApiError(503, "ServiceUnavailable", "down")
    reviews = Reviews(down, down, {"status": {"userInfo": {"username": "alice"}}})
    got = await default_identity(reviews, "host-1", retry_s=0.001)  # type: ignore[arg-type]
    assert got == "alice/host-1" and len(reviews.asked) == 3
    refused = Reviews(ApiError(403, "Forbidden", "no"))
    assert await default_identity(refused, "host-1") == "host-1"  # type: ignore[arg-type]
