"""The one cache per operator process: an informer per kind, run as one task group.

Every controller reads the same objects and subscribes to the same changes, so a pod event
costs one JSON decode and one validation however many controllers care. The informers live in
one :class:`asyncio.TaskGroup`: if one fails unexpectedly, all stop together, and cancelling
:meth:`SharedCache.run` stops them all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import structlog

from operators.cache.assume import AssumeCache
from operators.cache.backoff import Backoff
from operators.cache.informer import Handler, Informer, Parser
from operators.cache.rawkept import RawKept
from operators.kube import JsonDict, KubeClient, Resource

log = structlog.get_logger(__name__)


class SharedCache:
    """Informers for a fixed set of kinds, plus an assume cache per kind on request."""

    def __init__(
        self,
        client: KubeClient,
        parsers: Mapping[Resource, Parser[Any]],
        *,
        watch_timeout: int = 300,
        optional: Collection[Resource] = (),
        other_versions: Mapping[Resource, tuple[str, ...]] | None = None,
        forbidden_as_absent: Collection[Resource] = (),
        raw_kept: Mapping[Resource, Callable[[JsonDict], bool]] | None = None,
        listed_fields: Mapping[Resource, type] | None = None,
    ) -> None:
        self.client = client
        self.informers: dict[Resource, Informer[Any]] = {
            resource: Informer(
                client,
                resource,
                parse,
                watch_timeout=watch_timeout,
                backoff=Backoff(base=0.2, cap=30.0),
                optional=resource in optional,
                other_versions=(other_versions or {}).get(resource, ()),
                forbidden_as_absent=resource in forbidden_as_absent,
                raw_kept=RawKept(wanted) if (wanted := (raw_kept or {}).get(resource)) else None,
                listed_fields=(listed_fields or {}).get(resource),
            )
            for resource, parse in parsers.items()
        }
        self._assumed: dict[Resource, AssumeCache[Any]] = {}
        self.sync_seconds: float | None = None

    def __getitem__(self, resource: Resource) -> Informer[Any]:
        return self.informers[resource]

    def __contains__(self, resource: Resource) -> bool:
        return resource in self.informers

    def assumed(self, resource: Resource) -> AssumeCache[Any]:
        """The assume cache over one kind's informer (created once, shared by controllers)."""
        if resource not in self._assumed:
            self._assumed[resource] = AssumeCache(self.informers[resource])
        return self._assumed[resource]

    def subscribe(self, resources: Iterable[Resource], handler: Handler) -> None:
        for resource in resources:
            self.informers[resource].add_handler(handler)

    async def wait_synced(self, timeout: float | None = None) -> None:
        waits = [informer.synced.wait() for informer in self.informers.values()]
        await asyncio.wait_for(asyncio.gather(*waits), timeout)

    @property
    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers.values())

    @property
    def whole(self) -> bool:
        """Every informer holds every change up to where its watch is (no relist pending)."""
        return all(informer.whole for informer in self.informers.values())

    async def run(self, on_synced: Callable[[], None] | None = None) -> None:
        """Run every informer until cancelled; log the time until all have listed."""
        started = time.monotonic()
        async with asyncio.TaskGroup() as group:
            for resource, informer in self.informers.items():
                group.create_task(informer.run(), name=f"informer-{resource.plural}")
            await self.wait_synced()
            self.sync_seconds = time.monotonic() - started
            log.info(
                "shared cache synced",
                seconds=round(self.sync_seconds, 3),
                objects={r.plural: len(i) for r, i in self.informers.items()},
            )
            if on_synced is not None:
                on_synced()
