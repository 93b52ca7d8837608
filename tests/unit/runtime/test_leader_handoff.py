"""The elector's own loop against a fake Lease API: losing the Lease cancels the leader's work
at once (before a standby may take over), and a clean stop hands the Lease back so that a
standby takes over at its next try instead of waiting out the lease duration."""

from __future__ import annotations

import asyncio
import time

import pytest

from operators.kube import ApiError
from operators.leader import LeaderElector

from .test_leader import FakeLeases

RETRY = 0.05
RENEW_DEADLINE = 0.3
LEASE_DURATION = 3.0


def elector(
    api: FakeLeases, identity: str, *, lease_duration: float = LEASE_DURATION
) -> LeaderElector:
    return LeaderElector(
        api,  # type: ignore[arg-type]
        name="l",
        namespace="ns",
        identity=identity,
        lease_duration=lease_duration,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY,
    )


class Work:
    """The leader's work: runs until cancelled, and says when it was."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled_at: float | None = None

    async def __call__(self) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled_at = time.monotonic()
            raise


async def test_losing_the_lease_to_another_holder_cancels_the_work_at_once() -> None:
    api = FakeLeases()
    leader = elector(api, "a")
    work = Work()
    running = asyncio.create_task(leader.run_while_leader(work))
    await asyncio.wait_for(work.started.wait(), 5)
    # Another replica writes itself into the Lease (it thought a dead): a's renewals fail.
    assert api.lease is not None
    api.lease["spec"]["holderIdentity"] = "b"
    taken = time.monotonic()
    await asyncio.wait_for(running, 5)
    assert work.cancelled_at is not None, "the work outlived the leadership"
    lost_after = work.cancelled_at - taken
    # At most the renewal deadline (plus a retry period and scheduling slack) after the
    # last renewal, and well before the lease duration a standby waits out.
    assert lost_after < RENEW_DEADLINE + 3 * RETRY + 1.0 < LEASE_DURATION
    assert not leader.is_leader
    assert api.lease["spec"]["holderIdentity"] == "b", "the loser wrote the Lease back"


class Unreachable(FakeLeases):
    """The API server stops answering once ``down`` is set."""

    down = False

    async def get(self, *args: object, **kwargs: object) -> dict[str, object]:  # type: ignore[override]
        if self.down:
            raise ApiError(503, "ServiceUnavailable", "down")
        return await super().get(*args, **kwargs)  # type: ignore[arg-type]


async def test_an_unreachable_api_server_stops_the_work_before_a_standby_could_lead() -> None:
    api = Unreachable()
    leader = elector(api, "a")
    work = Work()
    running = asyncio.create_task(leader.run_while_leader(work))
    await asyncio.wait_for(work.started.wait(), 5)
    api.down = True
    cut = time.monotonic()
    await asyncio.wait_for(running, 5)
    assert work.cancelled_at is not None
    assert RENEW_DEADLINE - RETRY <= work.cancelled_at - cut < LEASE_DURATION


async def standby_takes_over(api: FakeLeases, standby: LeaderElector) -> float:
    """Seconds until the standby holds the Lease, trying every retry period."""
    start = time.monotonic()
    await asyncio.wait_for(standby.acquire(), 5)
    return time.monotonic() - start


@pytest.mark.parametrize("stop", ["work-ends", "cancelled"])
async def test_a_clean_stop_hands_the_lease_back_for_a_quick_takeover(stop: str) -> None:
    """The lease duration is 40 s, as in a real deployment: a standby that saw the Lease
    held must not wait for it to run out when the leader stops cleanly."""
    api = FakeLeases()
    leader = elector(api, "a", lease_duration=40.0)
    standby = elector(api, "b", lease_duration=40.0)
    finished = asyncio.Event()

    async def work() -> None:
        if stop == "work-ends":
            return
        finished.set()
        await asyncio.Event().wait()

    running = asyncio.create_task(leader.run_while_leader(work))
    if stop == "cancelled":
        await asyncio.wait_for(finished.wait(), 5)
        assert not await standby.try_acquire_or_renew()  # held: the standby waits
        running.cancel()  # SIGTERM: the process stops
        with pytest.raises(asyncio.CancelledError):
            await running
    else:
        await asyncio.wait_for(running, 5)
    assert api.lease is not None
    assert api.lease["spec"]["holderIdentity"] == ""
    assert api.lease["spec"]["leaseDurationSeconds"] == 1
    assert not leader.is_leader
    assert await standby_takes_over(api, standby) < 1.0
    assert api.lease["spec"]["holderIdentity"] == "b"
    assert api.lease["spec"]["leaseTransitions"] == 0  # handed back, not taken from "a"


async def test_a_leader_that_lost_the_lease_does_not_hand_back_the_new_holders() -> None:
    api = FakeLeases()
    leader = elector(api, "a")
    assert await leader.try_acquire_or_renew()
    leader.is_leader = True
    assert api.lease is not None
    api.lease["spec"]["holderIdentity"] = "b"
    await leader.release()
    assert api.lease["spec"]["holderIdentity"] == "b"
