"""A kind the server does not serve: optional ones read as empty, others keep retrying."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from operators.cache import informer as informer_module
from operators.cache.informer import Informer
from operators.kube import DEVICE_TAINT_RULES, NotFound


class NotServing:
    def __init__(self) -> None:
        self.lists = 0

    async def list(self, *_: Any, **__: Any) -> Any:
        self.lists += 1
        raise NotFound(404, "NotFound", "the server could not find the requested resource")


@pytest.mark.asyncio
@pytest.mark.parametrize("optional", [True, False])
async def test_not_served(optional: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informer_module, "NOT_SERVED_RECHECK", 0.01)
    client = NotServing()
    informer: Informer[Any] = Informer(client, DEVICE_TAINT_RULES, dict, optional=optional)  # type: ignore[arg-type]
    task = asyncio.create_task(informer.run())
    await asyncio.sleep(0.3)
    task.cancel()
    assert informer.synced.is_set() is optional
    assert len(informer) == 0
    if optional:
        assert client.lists > 2  # looked at again: the kind may be served later
