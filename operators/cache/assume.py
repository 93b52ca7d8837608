"""Writes we made that the watch has not shown us yet.

After the operator creates or updates an object, the API server's answer is newer than what
the informer holds until the watch event arrives. Controllers that read the informer in that
window would act on stale data: create a claim twice, or hand a device out twice. The assume
cache overlays the API's answers on the informer: :meth:`get` returns whichever is newer (by
resourceVersion, as upstream's assume cache does), and an assumption disappears as soon as the
informer reaches its version, or when the object is deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from operators.cache.informer import Change, Informer, Key, Meta, version_number
from operators.kube import JsonDict

T = TypeVar("T")


class AssumeCache(Generic[T]):
    """An informer plus the objects written through the API but not yet watched."""

    def __init__(self, informer: Informer[T]) -> None:
        self.informer = informer
        self._assumed: dict[Key, tuple[T, Meta]] = {}
        self._index_funcs: dict[str, Callable[[T], Iterable[Hashable]]] = {}
        self._listeners: list[Callable[[Key, T], None]] = []
        informer.add_handler(self._on_change)

    def add_listener(self, listener: Callable[[Key, T], None]) -> None:
        """Called with each object assumed from now on, as soon as the answer is in: a
        controller can act on another's write before the watch shows it."""
        self._listeners.append(listener)

    def assume(self, raw: JsonDict) -> T:
        """Record the API server's answer to our write; returns the parsed object."""
        meta = Meta.of(raw)
        obj = self.informer.parse(raw)
        known = self.informer.meta(meta.key)
        if known is None or version_number(known.resource_version) < version_number(
            meta.resource_version
        ):
            self._assumed[meta.key] = (obj, meta)
            for listener in self._listeners:
                listener(meta.key, obj)
        return obj

    def restore(self, key: Key) -> None:
        """Forget an assumption (the write it stood for is known to have failed)."""
        self._assumed.pop(key, None)

    def get(self, key: Key) -> T | None:
        assumed = self._assumed.get(key)
        if assumed is not None:
            return assumed[0]
        return self.informer.get(key)

    def is_assumed(self, key: Key) -> bool:
        return key in self._assumed

    def values(self) -> list[T]:
        merged = dict(self.informer.items())
        merged.update({key: obj for key, (obj, _) in self._assumed.items()})
        return list(merged.values())

    def add_index(self, name: str, func: Callable[[T], Iterable[Hashable]]) -> None:
        self._index_funcs[name] = func
        self.informer.add_index(name, func)

    def ensure_index(self, name: str, func: Callable[[T], Iterable[Hashable]]) -> None:
        """Add an index several controllers share, unless one of them already added it."""
        if name not in self._index_funcs:
            self.add_index(name, func)

    def by_index(self, name: str, value: Hashable) -> list[T]:
        """Informer index lookup with assumed objects merged in (assumed ones win)."""
        found: dict[Key, T] = dict(
            zip(
                self.informer.index_keys(name, value),
                self.informer.by_index(name, value),
                strict=True,
            )
        )
        func = self._index_funcs[name]
        for key, (obj, _) in self._assumed.items():
            if value in tuple(func(obj)):
                found[key] = obj
            else:
                found.pop(key, None)
        return [found[key] for key in sorted(found)]

    def _on_change(self, change: Change[Any]) -> None:
        assumed = self._assumed.get(change.key)
        if assumed is None:
            return
        if change.new is None:
            # Deleted, or replaced by an object of the same name: the assumption is void.
            self._assumed.pop(change.key, None)
            return
        meta = self.informer.meta(change.key)
        if meta is None:
            return
        if meta.uid != assumed[1].uid or version_number(meta.resource_version) >= version_number(
            assumed[1].resource_version
        ):
            self._assumed.pop(change.key, None)

    def __len__(self) -> int:
        return len(self._assumed)
