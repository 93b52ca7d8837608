"""The objects as the API server sent them, kept for the few an update will write back whole.

A merge patch makes kube-apiserver encode the stored object to JSON, merge the patch into it
and decode the result; an update (PUT) of the object as read only decodes it, which costs the
API server less per write (``bench/write_cost.py``: about a fifth less on a pod). An update
needs the whole object with every field, those this operator's models drop included, so the
informer keeps the raw object of the objects a controller is about to write: for pods, those
under dralloc's scheduling gate (the allocation writes them; in-tree the claim controller
writes their status first).

Bounded: a pod's raw object is ten times its parsed size, and a cluster may hold thousands of
gated pods waiting for devices. The most recently changed are kept (they are the ones written
next: a new pod gets its claim, its status and its allocation within seconds); a writer that
finds none, or one of another version, sends a merge patch as before.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from operators.kube import JsonDict

KEPT_OBJECTS = 2048
"""Raw objects kept per kind at most (a realistic pod's is about 20 KiB in Python: 40 MiB)."""


class RawKept:
    """The raw objects of one kind that ``wanted`` picks, without ``managedFields`` (an update
    that leaves them out keeps the stored ones), the most recently changed ``limit``."""

    def __init__(self, wanted: Callable[[JsonDict], bool], limit: int = KEPT_OBJECTS) -> None:
        self.wanted = wanted
        self.limit = limit
        self._raw: collections.OrderedDict[Any, JsonDict] = collections.OrderedDict()

    def saw(self, key: Any, raw: JsonDict) -> None:
        """A version of the object arrived (a list, a watch event)."""
        self.put(key, self.form(raw))

    def form(self, raw: JsonDict) -> JsonDict | None:
        """What would be kept of ``raw``, or None when it is not wanted: a list takes it
        as each page arrives and drops the rest of the page."""
        return without_managed_fields(raw) if self.wanted(raw) else None

    def put(self, key: Any, kept: JsonDict | None) -> None:
        """Keep ``kept`` (:meth:`form`'s) as the object's newest version; None forgets it."""
        if kept is None:
            self._raw.pop(key, None)
            return
        self._raw[key] = kept
        self._raw.move_to_end(key)
        while len(self._raw) > self.limit:
            self._raw.popitem(last=False)

    def forget(self, key: Any) -> None:
        self._raw.pop(key, None)

    def get(self, key: Any) -> JsonDict | None:
        return self._raw.get(key)

    def __len__(self) -> int:
        return len(self._raw)


def without_managed_fields(raw: JsonDict) -> JsonDict:
    """``raw`` without ``metadata.managedFields`` (not copied when it has none)."""
    metadata = raw.get("metadata") or {}
    if "managedFields" not in metadata:
        return raw
    return {**raw, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
