"""Records every change of claims, pods and quotas for the whole run.

One watch per kind, on the recorder's own connection (not the operator's cache), started
from resourceVersion 0 so the first events are the objects as they are. A watch that ends
is opened again from the last revision seen (bookmarks included), so nothing is skipped; one
refused with 410 (its revision compacted away, or a restarted API server's cache no longer
holding it) is replaced by a list, and the stretch between the last revision seen and the
list's is recorded as a :class:`Gap`: what changed inside it is known only as its result.
An API server that is down is retried every half second with the same revision.

Only namespaces the run owns are kept (``keep``), so another test's objects on a shared
control plane are not this run's history.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from operators.kube import Gone, KubeClient, Resource
from robustness.history import (
    Event,
    EventType,
    Facts,
    Gap,
    History,
    Kind,
    facts_of,
    resource_version,
)

RETRY_S = 0.5


class Recorder:
    def __init__(
        self,
        client: KubeClient,
        kinds: Mapping[Kind, Resource],
        keep: Callable[[str], bool],
    ) -> None:
        self.client = client
        self.kinds = dict(kinds)
        self.keep = keep
        """Whether a namespace is the run's."""
        self.started = time.monotonic()
        self.events: list[Event] = []
        self.gaps: list[Gap] = []
        self.relists = 0
        self.last_rv: dict[Kind, int] = dict.fromkeys(self.kinds, 0)
        self.watch_errors = 0

    def history(self, *, warned: frozenset[str] = frozenset(), settled: bool = True) -> History:
        return History(list(self.events), list(self.gaps), warned, settled)

    async def run(self) -> None:
        """Until cancelled: one watch loop per kind."""
        async with asyncio.TaskGroup() as group:
            for kind, resource in self.kinds.items():
                group.create_task(self._follow(kind, resource))

    def _record(
        self, kind: Kind, type_: EventType, obj: Mapping[str, Any], *, relisted: bool
    ) -> Facts | None:
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        if not self.keep(namespace):
            return None
        facts: Facts = facts_of(kind, obj)
        rv = resource_version(obj)
        self.events.append(
            Event(rv, kind, type_, facts, time.monotonic() - self.started, relisted=relisted)
        )
        return facts

    async def _follow(self, kind: Kind, resource: Resource) -> None:
        known: dict[str, int] = {}  # key -> the revision of its last recorded state
        rv = "0"
        while True:
            try:
                async for event in self.client.watch(resource, rv, timeout_seconds=60):
                    obj = event.object
                    seen = resource_version(obj)
                    if seen:
                        rv = str(seen)
                        self.last_rv[kind] = max(self.last_rv[kind], seen)
                    if event.type == "BOOKMARK":
                        continue
                    facts = self._record(kind, event.type, obj, relisted=False)
                    if facts is not None:
                        if event.type == "DELETED":
                            known.pop(facts.key, None)
                        else:
                            known[facts.key] = seen
            except Gone:
                rv = await self._relist(kind, resource, known)
            except Exception:  # the API server restarting: cut streams, refused connections
                self.watch_errors += 1
                await asyncio.sleep(RETRY_S)

    async def _relist(self, kind: Kind, resource: Resource, known: dict[str, int]) -> str:
        while True:
            try:
                items, list_rv = await self.client.list(resource)
                break
            except Exception:
                self.watch_errors += 1
                await asyncio.sleep(RETRY_S)
        self.relists += 1
        listed = int(list_rv or 0)
        self.gaps.append(Gap(kind, self.last_rv[kind], listed))
        present: set[str] = set()
        for obj in items:
            seen = resource_version(obj)
            key = _key(obj)
            present.add(key)
            if known.get(key) == seen:
                continue
            type_: EventType = "MODIFIED" if key in known else "ADDED"
            if self._record(kind, type_, obj, relisted=True) is not None:
                known[key] = seen
        for key in sorted(set(known) - present):
            namespace, name = key.split("/", 1)
            gone = {"metadata": {"namespace": namespace, "name": name, "resourceVersion": list_rv}}
            self._record(kind, "DELETED", gone, relisted=True)
            del known[key]
        self.last_rv[kind] = max(self.last_rv[kind], listed)
        return list_rv


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
