"""Writes we made that the watch has not shown us yet.

After the operator creates or updates an object, the API server's answer is newer than what
the informer holds until the watch event arrives. Controllers that read the informer in that
window would act on stale data: create a claim twice, or hand a device out twice. The assume
cache overlays the API's answers on the informer: :meth:`get` returns whichever is newer (by
resourceVersion, as upstream's assume cache does), and an assumption disappears as soon as the
informer reaches its version, or when the object is deleted.

An answer can also say the object is gone: a write that dropped the last finalizer of an
object being deleted. That answer carries no newer resourceVersion than the deletion's (the
API server deletes instead of storing it), so it cannot win by version; the cache hides the
object instead until the watch shows the deletion. Without that, every controller reading the
cache in between saw the object still held and wrote to it again, for a 404.

Both records end by the informer's progress, not only by an event for their key: an answer
at a version the watch has already passed, for an object it does not hold, is about an object
deleted since (assumed, it would stay forever: nothing under that name comes again), and a
removal the watch has already shown needs no hiding.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from operators.cache.informer import Change, Informer, Key, Meta, version_number
from operators.kube import JsonDict

T = TypeVar("T")

GONE_SECONDS = 300.0
"""How long a removal whose version is unknown (a 404, a Status answer) stays hidden while the
informer does not hold the object: its ADDED and DELETED events may still be on their way."""


@dataclass(frozen=True, slots=True)
class _Gone:
    uid: str
    version: int
    """The resourceVersion of the removal's answer, 0 when it had none."""
    until: float


class AssumeCache(Generic[T]):
    """An informer plus the objects written through the API but not yet watched."""

    def __init__(self, informer: Informer[T]) -> None:
        self.informer = informer
        self._assumed: dict[Key, tuple[T, Meta]] = {}
        self._index_funcs: dict[str, Callable[[T], Iterable[Hashable]]] = {}
        # The index values of assumed objects, kept as they come and go: a lookup reads
        # them instead of running every index function over every assumed object (while a
        # burst of creations is in flight there are thousands).
        self._assumed_values: dict[Key, dict[str, tuple[Hashable, ...]]] = {}
        self._assumed_by: dict[str, dict[Hashable, set[Key]]] = {}
        self._listeners: list[Callable[[Key, T], None]] = []
        # Objects our writes removed, hidden until the watch shows them deleted.
        self._gone: dict[Key, _Gone] = {}
        self._sweep_at = 64
        informer.add_handler(self._on_change)

    def add_listener(self, listener: Callable[[Key, T], None]) -> None:
        """Called with each object assumed from now on, as soon as the answer is in: a
        controller can act on another's write before the watch shows it."""
        self._listeners.append(listener)

    def assume(self, raw: JsonDict) -> T:
        """Record the API server's answer to our write; returns the parsed object."""
        meta = Meta.of(raw)
        obj = self.informer.parse(raw)
        metadata = raw.get("metadata") or {}
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
            self.assume_gone(meta.key, meta.uid, meta.resource_version)
            return obj
        gone = self._gone.get(meta.key)
        if gone is not None and gone.uid == meta.uid:
            return obj  # an answer from before our write that removed it
        if gone is not None:
            del self._gone[meta.key]  # a new object under the name
        version = version_number(meta.resource_version)
        known = self.informer.meta(meta.key)
        if known is None and 0 < version <= self.informer.seen_version:
            return obj  # the watch has passed this version and holds no such object: deleted
        assumed = self._assumed.get(meta.key)
        if assumed is not None and assumed[1].uid == meta.uid:
            known = assumed[1]  # an answer older than one assumed already changes nothing
        if known is None or version_number(known.resource_version) < version:
            self._forget(meta.key)
            self._assumed[meta.key] = (obj, meta)
            self._index(meta.key, obj)
            for listener in self._listeners:
                listener(meta.key, obj)
        return obj

    def assume_gone(self, key: Key, uid: str, resource_version: str = "") -> None:
        """Record that our write removed the object with this uid (a DELETE answered with a
        Status, the last finalizer dropped, a 404 naming it): it reads as absent until the
        watch agrees. ``resource_version`` is the answer's, when it had one."""
        assumed = self._assumed.get(key)
        if assumed is not None and assumed[1].uid == uid:
            self._forget(key)  # an assumption for a newer object under the name stays
        gone = _Gone(uid, version_number(resource_version), time.monotonic() + GONE_SECONDS)
        if self._needed(key, gone):
            self._gone[key] = gone
        if len(self._gone) >= self._sweep_at:
            for stale in [key for key, gone in self._gone.items() if not self._needed(key, gone)]:
                del self._gone[stale]
            self._sweep_at = max(64, 2 * len(self._gone))

    def _needed(self, key: Key, gone: _Gone) -> bool:
        """Whether the informer may still show the removed object."""
        meta = self.informer.meta(key)
        if meta is not None:
            return meta.uid == gone.uid  # until its DELETED; another uid is a new object
        if 0 < gone.version <= self.informer.seen_version:
            return False  # past a version it existed at, without it: its deletion was applied
        return time.monotonic() < gone.until

    def _hidden(self, key: Key) -> bool:
        gone = self._gone.get(key)
        if gone is None or key in self._assumed:
            return False  # an assumption is always for another uid: a new object's
        meta = self.informer.meta(key)
        return meta is None or meta.uid == gone.uid

    def restore(self, key: Key) -> None:
        """Forget an assumption (the write it stood for is known to have failed)."""
        self._forget(key)

    def _index(self, key: Key, obj: T) -> None:
        values = self._assumed_values[key] = {}
        for name, func in self._index_funcs.items():
            values[name] = found = tuple(dict.fromkeys(func(obj)))  # each value once
            by_value = self._assumed_by.setdefault(name, {})
            for value in found:
                by_value.setdefault(value, set()).add(key)

    def _forget(self, key: Key) -> None:
        if self._assumed.pop(key, None) is None:
            return
        for name, found in self._assumed_values.pop(key, {}).items():
            by_value = self._assumed_by[name]
            for value in found:
                keys = by_value[value]
                keys.discard(key)
                if not keys:
                    del by_value[value]

    def _void(self, key: Key, meta: Meta) -> bool:
        """Whether the watch has passed an assumed version without holding the object: it
        was deleted since (a relist after a watch outage does not name what it lacks)."""
        return (
            0 < version_number(meta.resource_version) <= self.informer.seen_version
            and self.informer.meta(key) is None
        )

    def get(self, key: Key) -> T | None:
        assumed = self._assumed.get(key)
        if assumed is not None:
            if not self._void(key, assumed[1]):
                return assumed[0]
            self._forget(key)
        if self._gone and self._hidden(key):
            return None
        return self.informer.get(key)

    def is_assumed(self, key: Key) -> bool:
        return key in self._assumed

    def values(self) -> list[T]:
        for key in [key for key, (_, meta) in self._assumed.items() if self._void(key, meta)]:
            self._forget(key)
        merged = dict(self.informer.items())
        merged.update({key: obj for key, (obj, _) in self._assumed.items()})
        for key in [key for key in self._gone if self._hidden(key)]:
            merged.pop(key, None)
        return list(merged.values())

    def add_index(self, name: str, func: Callable[[T], Iterable[Hashable]]) -> None:
        self._index_funcs[name] = func
        self.informer.add_index(name, func)
        by_value = self._assumed_by[name] = {}  # a new function: values made afresh
        for key, (obj, _) in self._assumed.items():
            self._assumed_values[key][name] = found = tuple(dict.fromkeys(func(obj)))
            for value in found:
                by_value.setdefault(value, set()).add(key)

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
        if self._assumed:
            assumed = self._assumed
            for key in [key for key in self._assumed_by[name].get(value, ()) if key not in found]:
                if self._void(key, assumed[key][1]):
                    self._forget(key)
            # An assumed version whose values no longer hold this one hides the informer's.
            for key in [key for key in found if key in assumed]:
                if value in self._assumed_values[key][name]:
                    found[key] = assumed[key][0]
                else:
                    del found[key]
            for key in self._assumed_by[name].get(value, ()):
                found[key] = assumed[key][0]
        if self._gone:
            for key in [key for key in found if self._hidden(key)]:
                del found[key]
        return [found[key] for key in sorted(found)]

    def _on_change(self, change: Change[Any]) -> None:
        key = change.key
        meta = self.informer.meta(key)  # None: deleted
        gone = self._gone.get(key)
        if gone is not None and (meta is None or meta.uid != gone.uid):
            del self._gone[key]  # the watch shows the deletion (or a new object)
        assumed = self._assumed.get(key)
        if assumed is None:
            return
        if (
            gone is not None
            and gone.uid != assumed[1].uid
            and (meta is None or meta.uid == gone.uid)
        ):
            # The watch, behind, shows the object we removed (or its deletion): our answer
            # for the new one under its name still stands.
            return
        if meta is None or meta.uid != assumed[1].uid:
            # Deleted, or replaced by an object of the same name: the assumption is void.
            self._forget(key)
            return
        if version_number(meta.resource_version) >= version_number(assumed[1].resource_version):
            self._forget(key)

    def __len__(self) -> int:
        return len(self._assumed)
