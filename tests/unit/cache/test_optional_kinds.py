"""A kind the server does not serve: optional ones read as empty, others keep retrying."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from operators.cache import informer as informer_module
from operators.cache.informer import Informer
from operators.cache.kinds import FORBIDDEN_AS_ABSENT, OPTIONAL
from operators.kube import DEVICE_TAINT_RULES, POD_GROUPS, ApiError, NotFound


class NotServing:
    def __init__(self) -> None:
        self.lists = 0

    async def list_pages(self, *args: Any, shape: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
        yield await self.list(*args, **kwargs)

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

    async def list_pages(self, *args: Any, shape: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
        yield await self.list(*args, **kwargs)

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


class Forbidden:
    def __init__(self) -> None:
        self.lists = 0

    async def list_pages(self, *args: Any, shape: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
        yield await self.list(*args, **kwargs)

    async def list(self, *_: Any, **__: Any) -> Any:
        self.lists += 1
        raise ApiError(403, "Forbidden", 'podgroups.scheduling.k8s.io is forbidden: User "x"')


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", [POD_GROUPS, DEVICE_TAINT_RULES])
async def test_a_kind_the_operator_may_not_read(kind: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """PodGroups only name gangs: where the operator's role lacks them (a role from before
    they were read), they read as empty and the operator runs on. A taint rule dropped for
    the same reason would hand out tainted devices: that kind keeps retrying."""
    monkeypatch.setattr(informer_module, "NOT_SERVED_RECHECK", 0.01)
    client = Forbidden()
    forbidden_as_absent = kind in FORBIDDEN_AS_ABSENT
    informer: Informer[Any] = Informer(
        client,  # type: ignore[arg-type]
        kind,
        dict,
        optional=True,
        forbidden_as_absent=forbidden_as_absent,
    )
    task = asyncio.create_task(informer.run())
    await asyncio.sleep(0.3)
    task.cancel()
    assert forbidden_as_absent is (kind == POD_GROUPS)
    assert informer.synced.is_set() is forbidden_as_absent
    assert informer.not_served is forbidden_as_absent


@pytest.mark.asyncio
async def test_pod_groups_are_optional_and_not_served_is_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert POD_GROUPS in OPTIONAL
    assert (POD_GROUPS.group, POD_GROUPS.version, POD_GROUPS.plural) == (
        "scheduling.k8s.io",
        "v1beta1",
        "podgroups",
    )
    monkeypatch.setattr(informer_module, "NOT_SERVED_RECHECK", 0.01)
    informer: Informer[Any] = Informer(NotServing(), POD_GROUPS, dict, optional=True)  # type: ignore[arg-type]
    assert not informer.not_served
    task = asyncio.create_task(informer.run())
    await asyncio.sleep(0.1)
    task.cancel()
    assert informer.not_served
