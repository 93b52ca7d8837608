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


class ServesBeta:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def list(self, resource: Any, *_: Any, **__: Any) -> Any:
        self.asked.append(resource.version)
        if resource.version != "v1beta2":
            raise NotFound(404, "NotFound", "the server could not find the requested resource")
        rule = {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
                "metadata": {"name": "r", "uid": "u", "resourceVersion": "5"}}  # fmt: skip
        return [rule], "5"

    async def watch(self, *_: Any, **__: Any) -> Any:
        await asyncio.sleep(10)
        yield  # pragma: no cover


@pytest.mark.asyncio
async def test_an_older_version_is_read_when_v1_is_not_served() -> None:
    client = ServesBeta()
    informer: Informer[Any] = Informer(
        client,  # type: ignore[arg-type]
        DEVICE_TAINT_RULES,
        dict,
        optional=True,
        other_versions=("v1beta2", "v1alpha3"),
    )
    task = asyncio.create_task(informer.run())
    await asyncio.sleep(0.2)
    task.cancel()
    assert client.asked[:2] == ["v1", "v1beta2"]
    assert informer.synced.is_set() and len(informer) == 1
