"""Kubernetes objects as the allocator reads them: JSON mappings with camelCase keys.

Callers pass plain dicts (from the API server or tests) or pydantic models
(``operators.api``); both are read through this one view, so the compilers never care
which they got.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_dict(obj: Any) -> Mapping[str, Any]:
    """JSON view (camelCase keys, unset fields left out) of a dict or a pydantic model."""
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if dump is None:
        raise TypeError(f"cannot read {type(obj).__name__} as a Kubernetes object")
    data: Mapping[str, Any] = dump(mode="json", by_alias=True, exclude_none=True)
    return data


def object_ref(obj: Any) -> tuple[str, str, str]:
    """(namespace, name, resourceVersion) of a dict or a pydantic model, "" when unset.

    Read straight from the model's fields: dumping a whole claim just for its
    name is a large share of the per-pod cost (keys are looked up several
    times per pod).
    """
    if type(obj) is dict:  # the exact type check is much cheaper than the ABC's
        return _dict_ref(obj)
    meta = getattr(obj, "metadata", _UNSET)  # a model: no Mapping ABC check on the hot path
    if meta is _UNSET and isinstance(obj, Mapping):
        return _dict_ref(obj)
    if meta is None or meta is _UNSET:
        if getattr(obj, "model_dump", None) is None:
            raise TypeError(f"cannot read {type(obj).__name__} as a Kubernetes object")
        return "", "", ""
    return (
        str(getattr(meta, "namespace", None) or ""),
        str(getattr(meta, "name", None) or ""),
        str(getattr(meta, "resource_version", None) or ""),
    )


_UNSET = object()


def _dict_ref(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("resourceVersion") or ""),
    )
