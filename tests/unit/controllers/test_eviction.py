"""The eviction rate limit: a sliding minute, and slots given back by evictions that did not
happen."""

from __future__ import annotations

import pytest

from operators.controllers.eviction import EvictionRateLimiter


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
