"""Each controller module registers its kopf handlers; settings switch a controller off."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

import operators.process  # noqa: F401  (imports every controller module, as kopf run does)
from operators.controllers.runtime import MEMO_KEY

from .fakes import FakeClient, runtime


def handler(activity: str, handler_id: str) -> Any:
    registry = kopf.get_default_registry()
    for found in registry._activities.get_all_handlers():
        if found.id == handler_id and str(found.activity) == activity:
            return found.fn
    raise AssertionError(f"no {activity} handler {handler_id}")


@pytest.mark.parametrize(
    ("name", "switch"),
    [
        ("claims", "claims_controller"),
        ("allocation", "allocation_controller"),
        ("taints", "taints_controller"),
    ],
)
async def test_startup_adds_the_controller_unless_switched_off(name: str, switch: str) -> None:
    for enabled in (True, False):
        memo = kopf.Memo()
        memo[MEMO_KEY] = runtime(FakeClient(), **{switch: enabled})
        await handler("startup", f"dralloc.{name}")(memo=memo)
        assert [c.name for c in memo[MEMO_KEY].controllers] == ([name] if enabled else [])
        health = handler("probe", f"dralloc.{name}")(memo=memo)
        assert health["enabled"] is enabled
