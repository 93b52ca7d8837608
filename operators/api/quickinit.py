"""A faster ``__init__`` for the frozen, slotted dataclasses made by the thousand.

A frozen dataclass's generated ``__init__`` sets each field through
``object.__setattr__``, looked up anew for every field: eight times the cost of an
ordinary dataclass's. For a pod's two views (:class:`~operators.cache.core.Pod` and the
scheduler's :class:`~operators.scheduling.model.PodNeeds`, 44 fields) that is a tenth of
reading a listed pod, and an operator restarted on a big cluster reads 150,000 of them
(``bench/cache_scale.py``); the allocator makes a compiled claim, its allocation and a
placement for every pod it decides. :func:`quick_init` gives such a class an ``__init__`` of
the same signature that sets each field through its slot's descriptor, bound once: about
half the time. The instances are the same: still frozen, equal and hashed alike.

Only for what it can keep exact: fields set by ``__init__``, none keyword-only, no default
factory, no ``__post_init__``; anything else is refused when the class is defined.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """Replace the ``__init__`` of a frozen, slotted dataclass (see the module)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__qualname__}: not a frozen, slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__qualname__}: __post_init__ is not supported")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    for field in fields:
        if not field.init or field.kw_only or field.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__qualname__}.{field.name}: not a plain init field")
        if field.name not in cls.__dict__:
            raise TypeError(f"{cls.__qualname__}.{field.name}: inherited, not a slot of its own")
        if field.name.startswith(("_set", "_default", "_make")) or field.name == "self":
            raise TypeError(f"{cls.__qualname__}.{field.name}: a name the new __init__ uses")
    closure: dict[str, Any] = {}
    parameters = []
    lines = []
    for index, field in enumerate(fields):
        closure[f"_set{index}"] = cls.__dict__[field.name].__set__
        if field.default is dataclasses.MISSING:
            parameters.append(field.name)
        else:
            closure[f"_default{index}"] = field.default
            parameters.append(f"{field.name}=_default{index}")
        lines.append(f"  _set{index}(self, {field.name})")
    source = (
        f"def _make({', '.join(closure)}):\n"
        f" def __init__(self, {', '.join(parameters)}):\n"
        + "\n".join(" " + line for line in lines or ["  pass"])
        + "\n return __init__\n"
    )
    namespace: dict[str, Any] = {}
    exec(source, {}, namespace)  # code made here, from field names only
    init = namespace["_make"](**closure)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {**{field.name: field.type for field in fields}, "return": None}
    cls.__init__ = init  # type: ignore[method-assign,misc]
    return cls
