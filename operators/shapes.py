"""A list's pages decoded into only the fields their reader reads.

An operator restarted on a big cluster spends most of its sync decoding pods and freeing what
it decoded (``bench/cache_scale.py``): a realistic pod is about 4 KiB of JSON, most of it
managedFields, environment, probes, volumes and container statuses that no parser reads.
msgspec, given a :class:`~typing.TypedDict` of the fields read (nested TypedDicts for the
levels read field by field, ``Any`` for the values read whole), skips the rest while it reads
the text and makes plain dicts of what is left: a third of the time of decoding everything,
freeing included.

A page that does not fit the shape (a field of another type than the shape says, text msgspec
refuses) reads as None, and so does a page with an item the reader wants whole (an object a
controller writes back with every field): the caller decodes such a page whole.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypedDict

import msgspec


def _never(item: dict[str, Any]) -> bool:
    return False


@dataclasses.dataclass(frozen=True)
class Shape:
    """What a reader keeps of each item of a list."""

    fields: type
    """A TypedDict (``total=False``) of the item's fields that are read; its nested
    TypedDicts name the fields read at their level, ``Any`` keeps a value whole."""
    whole: Callable[[dict[str, Any]], bool] = _never
    """Items wanted with every field all the same, judged from their shaped form (so it may
    read only fields the shape keeps): a page holding one is decoded whole."""

    def decode(self, text: str | bytes) -> dict[str, Any] | None:
        """The page with its items shaped; None when the page must be decoded whole."""
        try:
            page = _page_decoder(self.fields).decode(text)
        except (msgspec.DecodeError, ValueError, RecursionError):
            # Not the shape's types, text msgspec refuses (NaN, a lone surrogate, a str it
            # cannot encode), or nested deeper than it goes: ``json`` has its own say.
            return None
        if any(self.whole(item) for item in page.get("items") or ()):
            return None
        return page


@functools.cache
def _page_decoder(fields: type) -> msgspec.json.Decoder[Any]:
    # The functional form: the items' type is known only here.
    Page = TypedDict(  # type: ignore[misc]  # noqa: UP013
        "Page",
        {
            "apiVersion": Any,
            "kind": Any,
            "metadata": Any,
            "items": list[fields] | None,  # type: ignore[valid-type]
        },
        total=False,
    )
    return msgspec.json.Decoder(Page)
