"""A frozen dataclass's quicker __init__ makes the same instances as the generated one."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from operators.api.quickinit import quick_init
from operators.cache.core import Pod
from operators.scheduling.model import PodNeeds


@dataclasses.dataclass(frozen=True, slots=True)
class Generated:
    name: str
    labels: dict[str, str]
    count: int = 3
    tags: tuple[str, ...] = ()


@quick_init
@dataclasses.dataclass(frozen=True, slots=True)
class Quick:
    name: str
    labels: dict[str, str]
    count: int = 3
    tags: tuple[str, ...] = ()


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("a", {}), {}),
    (("a", {"x": "1"}, 5), {}),
    (("a",), {"labels": {}, "tags": ("t",)}),
    ((), {"tags": ("t",), "count": 0, "labels": {}, "name": "b"}),
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_the_same_calls_make_the_same_instance(args: Any, kwargs: Any) -> None:
    generated, quick = Generated(*args, **kwargs), Quick(*args, **kwargs)
    assert dataclasses.astuple(quick) == dataclasses.astuple(generated)
    assert quick == Quick(*args, **kwargs)
    assert repr(quick).removeprefix("Quick") == repr(generated).removeprefix("Generated")


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        (("a", {}, 1, (), 9), {}),
        (("a",), {"name": "b", "labels": {}}),
        (("a", {}), {"x": 1}),
    ],
)
def test_the_same_calls_are_refused(args: Any, kwargs: Any) -> None:
    with pytest.raises(TypeError):
        Generated(*args, **kwargs)
    with pytest.raises(TypeError):
        Quick(*args, **kwargs)


def test_the_instances_stay_frozen() -> None:
    quick = Quick("a", {}, 1, ("t",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.name = "b"  # type: ignore[misc]
    assert quick.name == "a"


@pytest.mark.parametrize("cls", [Pod, PodNeeds])
def test_the_pod_views_keep_the_signature_the_dataclass_gave_them(cls: type) -> None:
    twin: Any = dataclasses.dataclass(frozen=True, slots=True)(
        type(cls.__name__, (), {"__annotations__": dict(cls.__annotations__), **_defaults(cls)})
    )
    assert str(inspect.signature(cls)) == str(inspect.signature(twin))


def _defaults(cls: type) -> dict[str, Any]:
    return {
        f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING
    }


def _post_init() -> type:
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithPostInit:
        name: str

        def __post_init__(self) -> None:
            pass

    return WithPostInit


def _factory() -> type:
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithFactory:
        tags: list[str] = dataclasses.field(default_factory=list)

    return WithFactory


def _not_frozen() -> type:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        name: str

    return Mutable


def _no_slots() -> type:
    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        name: str

    return Unslotted


def _keyword_only() -> type:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class KeywordOnly:
        name: str

    return KeywordOnly


def _clashing_name() -> type:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Clashing:
        _set0: int

    return Clashing


def _inherited() -> type:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Base:
        name: str

    @dataclasses.dataclass(frozen=True, slots=True)
    class Derived(Base):
        more: str = ""

    return Derived


@pytest.mark.parametrize(
    "make",
    [_post_init, _factory, _not_frozen, _no_slots, _keyword_only, _clashing_name, _inherited],
)
def test_what_it_cannot_keep_exact_is_refused(make: Any) -> None:
    with pytest.raises(TypeError):
        quick_init(make())
