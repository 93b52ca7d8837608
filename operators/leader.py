"""Leader election on a coordination.k8s.io Lease, so two replicas never both act.

The algorithm is client-go's: a candidate takes the Lease when it is free or when its holder
has not renewed it for ``lease_duration`` *as observed locally* (so clock skew between
replicas does not matter); the leader renews every ``retry_period`` and gives up leadership
when it could not renew for ``renew_deadline``. Because ``renew_deadline < lease_duration``,
a leader that lost contact stops acting before any standby can take over. Every write is a
PUT with the resourceVersion just read, so two candidates cannot both win one round.

:func:`decide` is the pure decision; :class:`LeaderElector` does the I/O.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from operators.kube import (
    LEASES,
    REQUEST_ERRORS,
    SELF_SUBJECT_REVIEWS,
    ApiError,
    Conflict,
    FailureKind,
    JsonDict,
    KubeClient,
    NotFound,
    failure_kind,
)

log = structlog.get_logger(__name__)

LEASE_RBAC = "get, create and update on leases.coordination.k8s.io"


POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
"""Where the API server names the pod a projected ServiceAccount token is bound to."""


def identity_for(user_info: JsonDict, process: str) -> str:
    """The Lease holder name by which the fencing policy knows this process as the writer
    (manifests/base/claim-allocation-fencing.yaml): the pod's name for a token bound to a pod
    (every in-cluster replica), else ``<user>/<process>`` (``kopf run`` from a laptop); just
    ``process`` when the API server did not say who we are."""
    pods = (user_info.get("extra") or {}).get(POD_NAME_EXTRA) or []
    if pods and pods[0]:
        return str(pods[0])
    user = user_info.get("username") or ""
    return f"{user}/{process}" if user else process


IDENTITY_RETRY_S = 2.0  # between asks while the API server does not answer


async def default_identity(
    client: KubeClient, process: str, retry_s: float = IDENTITY_RETRY_S
) -> str:
    """:func:`identity_for` the user the API server knows this client as (a SelfSubjectReview,
    which every authenticated user may make). Asked again while the API server does not
    answer (the operator can do nothing without it anyway): a name guessed meanwhile would be
    one the fencing policy never accepts, for the life of the process. An answer that is a
    refusal (the review not served, or not allowed) leaves ``process``, said once."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    told = False
    while True:
        try:
            review = await client.create(SELF_SUBJECT_REVIEWS, body)
        except REQUEST_ERRORS as error:
            answered = (
                isinstance(error, ApiError) and failure_kind(error) is not FailureKind.UNAVAILABLE
            )
            if answered:
                log.warning(
                    "the API server does not say who this operator is; the Lease names it by "
                    "host and process, which the fencing policy does not accept (set --identity)",
                    error=str(error)[:200],
                )
                return process
            if not told:
                told = True
                log.warning(
                    "cannot ask the API server who this operator is yet; asking again",
                    error=str(error)[:200],
                )
            await asyncio.sleep(retry_s)
            continue
        return identity_for((review.get("status") or {}).get("userInfo") or {}, process)


class LeaseUnusable(Exception):
    """The Lease cannot be read or written where the settings put it: a setup error, not a
    passing one. The message is one line naming the Lease, the problem and the fix."""


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    holder: str
    lease_duration: float
    acquire_time: str
    renew_time: str
    transitions: int

    @classmethod
    def of(cls, lease: JsonDict) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=spec.get("holderIdentity") or "",
            lease_duration=float(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime") or "",
            renew_time=spec.get("renewTime") or "",
            transitions=int(spec.get("leaseTransitions") or 0),
        )


@dataclasses.dataclass
class Observation:
    """The last record seen and when (local monotonic clock) it last changed."""

    record: LeaseRecord | None = None
    changed_at: float = 0.0

    def see(self, record: LeaseRecord, now: float) -> None:
        if record != self.record:
            self.record = record
            self.changed_at = now


def decide(identity: str, observation: Observation, now: float) -> bool:
    """May ``identity`` write itself into the lease now?"""
    record = observation.record
    if record is None or not record.holder or record.holder == identity:
        return True
    return now >= observation.changed_at + record.lease_duration


def _now_micro() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.observation = Observation()
        self.is_leader = False
        self.term = 0
        """The Lease's transition count when this candidate last took it (its term)."""
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

    async def try_acquire_or_renew(self) -> bool:
        now = self.clock()
        try:
            lease = await self.client.get(LEASES, self.name, self.namespace)
        except NotFound:
            lease = None
        if lease is None:
            body = self._lease_body(None, None)
            try:
                await self.client.create(LEASES, body, self.namespace)
            except ApiError as error:
                self._log.info("lease create lost", error=str(error)[:200])
                return False
            self.observation.see(LeaseRecord.of(body), now)
            self.term = LeaseRecord.of(body).transitions
            return True
        record = LeaseRecord.of(lease)
        self.observation.see(record, now)
        if not decide(self.identity, self.observation, now):
            return False
        body = self._lease_body(lease, record)
        try:
            updated = await self.client.replace(LEASES, body)
        except (Conflict, NotFound):
            return False
        self.observation.see(LeaseRecord.of(updated), self.clock())
        self.term = LeaseRecord.of(updated).transitions
        return True

    def _lease_body(self, lease: JsonDict | None, record: LeaseRecord | None) -> JsonDict:
        now = _now_micro()
        spec: dict[str, Any] = dict((lease or {}).get("spec") or {})
        taking_over = record is None or record.holder != self.identity
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(1, round(self.lease_duration)),
            renewTime=now,
        )
        if taking_over:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = (
                (record.transitions + 1)
                if record and record.holder
                else (record.transitions if record else 0)
            )
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if lease is not None:
            metadata["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    async def preflight(self) -> None:
        """Check once, at startup, that this identity can use the Lease where it is.

        Reads the Lease, then creates it (or, if it exists, updates it unchanged) as a dry
        run, so nothing changes: a missing namespace or missing RBAC becomes a
        :class:`LeaseUnusable` at once, instead of an operator that waits for leadership
        forever. An API server that does not answer yet is waited for.
        """
        while True:
            method = "GET"
            try:
                try:
                    lease: JsonDict | None = await self.client.get(
                        LEASES, self.name, self.namespace
                    )
                except NotFound:
                    lease = None
                if lease is None:
                    body = self._lease_body(None, None)
                    path, method = LEASES.path(self.namespace), "POST"
                else:
                    body = lease
                    path, method = LEASES.path(self.namespace, self.name), "PUT"
                await self.client.request(method, path, params={"dryRun": "All"}, body=body)
                return
            except Conflict:
                pass  # created or renewed by someone else meanwhile: look again
            except ApiError as error:
                if isinstance(error, NotFound) and method == "POST":
                    raise LeaseUnusable(
                        self._unusable(f'namespace "{self.namespace}" does not exist')
                    ) from None
                if error.status in (401, 403):
                    raise LeaseUnusable(
                        self._unusable(f"forbidden ({error.message or error.reason})")
                    ) from None
                self._log.warning("lease check failed; retrying", error=str(error)[:200])
            except Exception as error:
                self._log.warning("lease check failed; retrying", error=str(error)[:200])
            await asyncio.sleep(self.retry_period)

    def _unusable(self, problem: str) -> str:
        return (
            f"cannot use the leader-election Lease {self.namespace}/{self.name}: {problem}; "
            f"the operator's identity needs {LEASE_RBAC} in namespace {self.namespace} "
            "(manifests/base/role-leases.yaml), or set --lease-namespace "
            "(DRALLOC_LEASE_NAMESPACE)"
        )

    async def acquire(self) -> None:
        """Return once this candidate holds the lease."""
        self._log.info("waiting for leadership")
        while True:
            try:
                if await self.try_acquire_or_renew():
                    self.is_leader = True
                    self._log.info("became leader")
                    return
            except Exception as error:
                self._log.warning("lease acquisition failed", error=str(error)[:200])
            await asyncio.sleep(self.retry_period)

    async def hold(self) -> None:
        """Renew until a renewal deadline passes; then return (leadership is lost)."""
        last_renewal = self.clock()
        while True:
            await asyncio.sleep(self.retry_period)
            try:
                renewed = await asyncio.wait_for(
                    self.try_acquire_or_renew(), timeout=self.renew_deadline
                )
            except Exception as error:
                self._log.warning("lease renewal failed", error=str(error)[:200])
                renewed = False
            if renewed:
                last_renewal = self.clock()
            elif self.clock() - last_renewal >= self.renew_deadline:
                self.is_leader = False
                self._log.warning("lost leadership")
                return

    async def release(self) -> None:
        """Hand the lease back on a clean shutdown so a standby takes over at once."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = await self.client.get(LEASES, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"]["holderIdentity"] = ""
            lease["spec"]["leaseDurationSeconds"] = 1
            await self.client.replace(LEASES, lease)
            self._log.info("released leadership")
        except Exception as error:
            self._log.warning("lease release failed", error=str(error)[:200])

    async def run_while_leader(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Acquire, then run ``work`` until it ends or leadership is lost (then cancel it)."""
        await self.acquire()
        try:
            async with asyncio.TaskGroup() as group:
                work_task = group.create_task(work(), name="leader-work")
                holder = group.create_task(self.hold(), name="lease-renewal")
                done, _ = await asyncio.wait(
                    {work_task, holder}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in (work_task, holder):
                    if task not in done:
                        task.cancel()
        finally:
            if self.is_leader:
                await asyncio.shield(self.release())
