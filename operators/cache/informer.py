"""One list+watch per resource kind, kept as validated objects and fanned out to subscribers.

This is the client-go informer pattern, written for asyncio because kopf's indexes make startup
quadratic in the number of objects and never drop objects that vanished during a watch gap
(reference python-stack §1.2). Each informer:

* lists (paginated), then watches from the list's resourceVersion with bookmarks; each page is
  validated as it arrives and its raw objects dropped (150,000 pods as decoded JSON are
  gigabytes, validated a tenth of it), and the whole list is stored at once when the last
  page is in, so no handler or reader ever sees a mix of two lists;
* on ``410 Gone`` relists and *diffs* the new list against its store, so objects deleted while
  the watch was down produce DELETED changes like any other deletion;
* retries errors with exponential backoff, keeping what it has; while the API server refuses
  connections (it is down, not overloaded: a refused connection costs it nothing) the retries
  stay a few seconds apart, so the operator is back at work soon after it is;
* validates each object once, when its event arrives, into whatever ``parse`` returns (the
  frozen models of :mod:`operators.api`); an object that does not validate is logged and
  treated as absent, so one bad object never stops the others;
* calls every handler synchronously with a :class:`Change`; handlers only enqueue work.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import structlog

from operators.api.quickinit import quick_init
from operators.cache.backoff import Backoff
from operators.cache.rawkept import RawKept
from operators.kube import (
    REQUEST_ERRORS,
    UNREACHABLE_RETRY_CAP_S,
    ApiError,
    Gone,
    JsonDict,
    KubeClient,
    NotFound,
    Resource,
    unreachable,
)
from operators.shapes import Shape

T = TypeVar("T")

WATCH_ERRORS: tuple[type[Exception], ...] = (*REQUEST_ERRORS, ValueError)
"""What a list or watch raises that backs off and tries again: the API server's answers and
the transport's failures (see operators.kube), and a body that does not parse."""

log = structlog.get_logger(__name__)

NOT_SERVED_RECHECK = 60.0  # seconds between lists of an optional kind the server lacks


@quick_init
@dataclasses.dataclass(frozen=True, order=True, slots=True)
class Key:
    """Namespace ("" for cluster-scoped objects) and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@quick_init
@dataclasses.dataclass(frozen=True, slots=True)
class Meta:
    """The few metadata fields the cache itself needs, read from the raw object."""

    key: Key
    uid: str
    resource_version: str

    @classmethod
    def of(cls, raw: JsonDict) -> Meta:
        metadata = raw.get("metadata") or {}
        return cls(
            Key(metadata.get("namespace") or "", metadata.get("name") or ""),
            metadata.get("uid") or "",
            str(metadata.get("resourceVersion") or ""),
        )


# Slotted, with the quicker __init__: one is made per object a list stores. (Python 3.11
# cannot make a slotted frozen Generic dataclass through a subscripted class, Change[X](...):
# nothing does.)
@quick_init
@dataclasses.dataclass(frozen=True, slots=True)
class Change(Generic[T]):
    """An object appeared (old is None), changed, or disappeared (new is None)."""

    resource: Resource
    key: Key
    old: T | None
    new: T | None

    @property
    def deleted(self) -> bool:
        return self.new is None


Handler = Callable[[Change[Any]], None]
Parser = Callable[[JsonDict], T]
IndexFunc = Callable[[T], Iterable[Hashable]]


def version_number(resource_version: str) -> int:
    """resourceVersions are opaque, but every API server in practice uses etcd revisions."""
    try:
        return int(resource_version)
    except ValueError:
        return -1


@quick_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Read(Generic[T]):
    """One object as an event or a list page brought it, validated, not yet stored."""

    meta: Meta
    new: T | None
    """The object validated; None when it did not validate (or is unchanged)."""
    unchanged: bool = False
    """The cache holds this version already: nothing to store or tell."""
    kept: JsonDict | None = None
    """What the kind's :class:`RawKept` keeps of the raw object, if it wants it."""


def _listed_shape(fields: type | None, raw_kept: RawKept | None) -> Shape | None:
    if fields is None:
        return None
    return Shape(fields) if raw_kept is None else Shape(fields, whole=raw_kept.wanted)


class Informer(Generic[T]):
    """The cache of one resource kind."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        parse: Parser[T],
        *,
        watch_timeout: int = 300,
        backoff: Backoff | None = None,
        optional: bool = False,
        other_versions: tuple[str, ...] = (),
        forbidden_as_absent: bool = False,
        raw_kept: RawKept | None = None,
        listed_fields: type | None = None,
    ) -> None:
        self.client = client
        self.raw_kept = raw_kept
        """Raw objects kept for writers that send them back whole (None: none kept)."""
        self.shape = _listed_shape(listed_fields, raw_kept)
        """What a list decodes of each object: the fields ``parse`` reads (None: all).
        A page holding an object whose raw form is kept is decoded whole. Watch events
        are decoded whole: they come one at a time."""
        self.resource = resource
        self.optional = optional
        """A kind the server may not serve (404): then it reads as empty, checked again
        every :data:`NOT_SERVED_RECHECK` seconds."""
        self.forbidden_as_absent = optional and forbidden_as_absent
        """An optional kind that a 403 (the operator's role may not list it) makes read as
        empty too, instead of retrying with backoff (and never syncing)."""
        self.not_served = False
        """The optional kind was found missing (or forbidden) at every version, and reads as
        empty until a later list succeeds."""
        self.versions = (resource.version, *other_versions)
        """Versions to read an optional kind at, in order of preference (a kind reaches v1
        only in some release: older servers serve it at a beta version or not at all)."""
        self._version = 0
        self.seen_version = 0
        """The newest resourceVersion this cache has reached (a list, a watch event or a
        bookmark): every change up to it has been applied, so an object it does not hold
        did not exist at that version. 0 before the first list."""
        self.parse = parse
        self.watch_timeout = watch_timeout
        self.backoff = backoff or Backoff(base=0.2, cap=30.0)
        self.synced = asyncio.Event()
        self.whole = False
        """The cache holds every change up to where its watch is: set by each list, cleared
        when the watch expired (410) or failed long enough to need a relist. In between,
        changes were missed; deciding on such a view could hand out a device someone took
        meanwhile, so the allocation controller waits for it (``SharedCache.whole``)."""
        self.sync_seconds: float | None = None
        self.relists = 0
        """Lists after the first: the watch expired (410) or failed too long to resume."""
        self._objects: dict[Key, T] = {}
        self._meta: dict[Key, Meta] = {}
        self._handlers: list[Handler] = []
        self._index_funcs: dict[str, IndexFunc[T]] = {}
        self._indexes: dict[str, dict[Hashable, set[Key]]] = {}
        self._indexed_values: dict[str, dict[Key, tuple[Hashable, ...]]] = {}
        self._log = log.bind(kind=resource.kind)

    # --- reading ---------------------------------------------------------------------------

    def get(self, key: Key) -> T | None:
        return self._objects.get(key)

    def meta(self, key: Key) -> Meta | None:
        return self._meta.get(key)

    def raw(self, key: Key) -> JsonDict | None:
        """The object as last sent by the API server, where this kind keeps it (see
        :mod:`operators.cache.rawkept`); a writer checks its resourceVersion."""
        return self.raw_kept.get(key) if self.raw_kept is not None else None

    def keys(self) -> list[Key]:
        return list(self._objects)

    def values(self) -> list[T]:
        return list(self._objects.values())

    def items(self) -> Iterator[tuple[Key, T]]:
        return iter(list(self._objects.items()))

    def __len__(self) -> int:
        return len(self._objects)

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._objects))

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def by_index(self, index: str, value: Hashable) -> list[T]:
        keys = self._indexes[index].get(value, ())
        return [self._objects[key] for key in sorted(keys)]

    def index_keys(self, index: str, value: Hashable) -> list[Key]:
        return sorted(self._indexes[index].get(value, ()))

    def index_iter(self, index: str, value: Hashable) -> Iterator[Key]:
        """The keys with this index value in no order, without sorting them (to find one);
        the cache must not change while they are iterated."""
        return iter(self._indexes[index].get(value, ()))

    def index_count(self, index: str, value: Hashable) -> int:
        """How many objects have this index value (without listing them)."""
        return len(self._indexes[index].get(value, ()))

    # --- subscribing -----------------------------------------------------------------------

    def add_handler(self, handler: Handler) -> None:
        """Subscribe; a late subscriber first gets an ADDED change for every cached object."""
        self._handlers.append(handler)
        for key, obj in list(self._objects.items()):
            self._call(handler, Change(self.resource, key, None, obj))

    def ensure_index(self, name: str, func: IndexFunc[T]) -> None:
        """Add an index several subscribers share, unless one of them already added it."""
        if name not in self._index_funcs:
            self.add_index(name, func)

    def add_index(self, name: str, func: IndexFunc[T]) -> None:
        self._index_funcs[name] = func
        self._indexes[name] = {}
        self._indexed_values[name] = {}
        for key, obj in self._objects.items():
            self._reindex(name, key, obj)

    # --- applying events (also used directly by tests) -------------------------------------

    def apply(self, event_type: str, raw: JsonDict) -> Change[T] | None:
        """Apply one watch event to the store and notify; returns the change, if any."""
        meta = Meta.of(raw)
        change = self._apply(event_type, raw, meta)
        self._reached(meta.resource_version)  # only once applied
        return change

    def _reached(self, resource_version: str) -> None:
        version = version_number(resource_version)
        if version > self.seen_version:
            self.seen_version = version

    def _apply(self, event_type: str, raw: JsonDict, meta: Meta) -> Change[T] | None:
        if event_type == "DELETED":
            if meta.key not in self._objects:
                return None
            return self._store(meta.key, None, None)
        return self._commit(self._read(raw, meta))

    def _read(self, raw: JsonDict, meta: Meta) -> _Read[T]:
        """Validate one object (unless this version is held already)."""
        known = self._meta.get(meta.key)
        if known is not None and known.resource_version == meta.resource_version:
            return _Read(meta, None, unchanged=True)
        try:
            new = self.parse(raw)
        except ValueError as error:
            self._log.warning(
                "invalid object ignored", object=str(meta.key), error=str(error)[:500]
            )
            return _Read(meta, None)
        kept = self.raw_kept.form(raw) if self.raw_kept is not None else None
        return _Read(meta, new, kept=kept)

    def _commit(self, read: _Read[T]) -> Change[T] | None:
        """Store what :meth:`_read` validated, and tell the handlers."""
        if read.unchanged:
            return None
        key = read.meta.key
        old = self._objects.get(key)
        if read.new is None:  # did not validate: as if absent
            return self._store(key, None, None) if old is not None else None
        if self.raw_kept is not None:
            self.raw_kept.put(key, read.kept)
        known = self._meta.get(key)
        if known is not None and known.uid != read.meta.uid and old is not None:
            self._store(key, None, None)  # the old object went away; a new one took its name
        return self._store(key, read.new, read.meta)

    def replace(self, raws: Iterable[JsonDict]) -> list[Change[T]]:
        """Make the store equal to a fresh list; objects missing from it are deleted."""
        return self._replace([self._read(raw, Meta.of(raw)) for raw in raws])

    def _replace(self, reads: Iterable[_Read[T]]) -> list[Change[T]]:
        changes: list[Change[T]] = []
        seen: set[Key] = set()
        for read in reads:
            seen.add(read.meta.key)
            change = self._commit(read)
            self._reached(read.meta.resource_version)
            if change is not None:
                changes.append(change)
        for key in [key for key in self._objects if key not in seen]:
            changes.append(self._store(key, None, None))
        return changes

    async def _list(self) -> str:
        """List the kind page by page (each validated as it arrives), then store the whole
        list at once; returns the list's resourceVersion."""
        reads: list[_Read[T]] = []
        listed = ""
        async for items, version in self.client.list_pages(self.served, shape=self.shape):
            reads.extend(self._read(raw, Meta.of(raw)) for raw in items)
            listed = version
            del items  # the page's raw objects go now, not with the next page
        self._replace(reads)
        return listed

    def _store(self, key: Key, new: T | None, meta: Meta | None) -> Change[T]:
        old = self._objects.get(key)
        if new is None or meta is None:
            self._objects.pop(key, None)
            self._meta.pop(key, None)
            if self.raw_kept is not None:
                self.raw_kept.forget(key)
        else:
            self._objects[key] = new
            self._meta[key] = meta
        for name in self._index_funcs:
            self._reindex(name, key, new)
        change = Change(self.resource, key, old, new)
        for handler in list(self._handlers):
            self._call(handler, change)
        return change

    def _reindex(self, name: str, key: Key, obj: T | None) -> None:
        index = self._indexes[name]
        indexed = self._indexed_values[name]
        for value in indexed.pop(key, ()):
            bucket = index.get(value)
            if bucket is not None:
                bucket.discard(key)
                if not bucket:
                    del index[value]
        if obj is None:
            return
        values = tuple(self._index_funcs[name](obj))
        if values:
            indexed[key] = values
            for value in values:
                bucket = index.get(value)
                if bucket is None:  # no empty set made for a bucket that exists (a relist)
                    index[value] = {key}
                else:
                    bucket.add(key)

    def _call(self, handler: Handler, change: Change[Any]) -> None:
        try:
            handler(change)
        except Exception:
            self._log.exception(
                "cache handler failed", handler=getattr(handler, "__qualname__", "")
            )

    # --- the list+watch loop ---------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled."""
        resource_version = ""
        started = time.monotonic()
        while True:
            try:
                if not resource_version:
                    resource_version = await self._list()
                    self.not_served = False
                    self._reached(resource_version)
                    self.whole = True
                    if self.synced.is_set():
                        self.relists += 1
                        self._log.info(
                            "cache relisted", objects=len(self._objects), relists=self.relists
                        )
                    else:
                        self.sync_seconds = time.monotonic() - started
                        self.synced.set()
                        self._log.info(
                            "cache synced", objects=len(self._objects), seconds=self.sync_seconds
                        )
                resource_version = await self._watch_once(resource_version)
                self.backoff.reset()
            except Gone:
                self._log.info("watch expired, relisting")
                resource_version = ""
                self.whole = False
            except NotFound as error:
                resource_version = ""
                self.whole = False
                if self.optional:
                    await self._not_served()
                else:
                    await self._back_off(error)
            except WATCH_ERRORS as error:
                if isinstance(error, ApiError) and error.status == 403 and self.forbidden_as_absent:
                    resource_version = ""
                    self.whole = False
                    await self._not_served(forbidden=True)
                elif await self._back_off(error):
                    resource_version = ""  # a long gap: relist rather than trust the old version
                    self.whole = False

    async def _back_off(self, error: BaseException) -> bool:
        """Wait before the next attempt; True once failures have gone on for a while."""
        delay = self.backoff.next(cap=UNREACHABLE_RETRY_CAP_S if unreachable(error) else None)
        self._log.warning("list/watch failed", error=str(error)[:300], retry_in=delay)
        await asyncio.sleep(delay)
        return self.backoff.failures > 3

    @property
    def served(self) -> Resource:
        """The resource at the version being read."""
        version = self.versions[self._version]
        if version == self.resource.version:
            return self.resource
        return dataclasses.replace(self.resource, version=version)

    async def _not_served(self, *, forbidden: bool = False) -> None:
        if not forbidden and self._version + 1 < len(self.versions):
            self._version += 1  # the next version at once
            self._log.info("kind not served at this version", trying=self.served.version)
            return
        if self._objects or not self.synced.is_set():
            # A kind that may be forbidden as well is one whose absence changes little (its
            # objects only refine decisions): not being served is the usual case there.
            report = (
                self._log.info if self.forbidden_as_absent and not forbidden else self._log.warning
            )
            report(
                "kind not readable here (the operator's role may not list it); read as empty"
                if forbidden
                else "kind not served here; read as empty",
                resource=self.resource.plural,
                versions=list(self.versions),
            )
        self._version = 0
        self.not_served = True
        self.replace([])
        self.whole = True
        self.synced.set()
        await asyncio.sleep(NOT_SERVED_RECHECK)

    async def _watch_once(self, resource_version: str) -> str:
        async for event in self.client.watch(
            self.served, resource_version, timeout_seconds=self.watch_timeout
        ):
            version = (event.object.get("metadata") or {}).get("resourceVersion")
            if event.type != "BOOKMARK":
                self.apply(event.type, event.object)
            elif version:
                self._reached(str(version))
            if version:
                resource_version = str(version)
        return resource_version
