"""The assume cache overlays our own writes until the watch catches up."""

from __future__ import annotations

from typing import Any

from operators.cache.assume import AssumeCache
from operators.cache.informer import Informer, Key
from operators.kube import RESOURCE_CLAIMS, JsonDict


def claim(name: str, rv: str, owner: str = "", uid: str = "") -> JsonDict:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "resourceVersion": rv,
            "uid": uid or f"u-{name}",
        },
        "owner": owner,
        "rv": rv,
    }


def parse(raw: JsonDict) -> dict[str, Any]:
    return {"name": raw["metadata"]["name"], "owner": raw["owner"], "rv": raw["rv"]}


def make() -> AssumeCache[dict[str, Any]]:
    informer: Informer[dict[str, Any]] = Informer(None, RESOURCE_CLAIMS, parse)  # type: ignore[arg-type]
    cache = AssumeCache(informer)
    cache.add_index("owner", lambda c: [c["owner"]] if c["owner"] else [])
    return cache


def test_created_object_visible_before_watch() -> None:
    cache = make()
    cache.assume(claim("c1", "5", owner="pod-uid"))
    assert cache.get(Key("ns", "c1")) == {"name": "c1", "owner": "pod-uid", "rv": "5"}
    assert [c["name"] for c in cache.by_index("owner", "pod-uid")] == ["c1"]
    cache.informer.apply("ADDED", claim("c1", "5", owner="pod-uid"))
    assert not cache.is_assumed(Key("ns", "c1"))


def test_newer_assumption_wins_until_informer_catches_up() -> None:
    cache = make()
    cache.informer.apply("ADDED", claim("c1", "3"))
    cache.assume(claim("c1", "7", owner="x"))
    cache.informer.apply("MODIFIED", claim("c1", "6"))  # an older event in flight
    assert cache.get(Key("ns", "c1"))["rv"] == "7"  # type: ignore[index]
    cache.informer.apply("MODIFIED", claim("c1", "8"))
    assert cache.get(Key("ns", "c1"))["rv"] == "8"  # type: ignore[index]
    assert len(cache) == 0


def test_older_answer_is_not_assumed() -> None:
    cache = make()
    cache.informer.apply("ADDED", claim("c1", "9"))
    cache.assume(claim("c1", "4"))
    assert cache.get(Key("ns", "c1"))["rv"] == "9"  # type: ignore[index]


def test_restore_and_delete_drop_assumptions() -> None:
    cache = make()
    cache.assume(claim("c1", "5"))
    cache.restore(Key("ns", "c1"))
    assert cache.get(Key("ns", "c1")) is None
    cache.informer.apply("ADDED", claim("c2", "1"))
    cache.assume(claim("c2", "9"))
    cache.informer.apply("DELETED", claim("c2", "10"))
    assert cache.get(Key("ns", "c2")) is None


def test_index_reflects_assumed_change_of_owner() -> None:
    cache = make()
    cache.informer.apply("ADDED", claim("c1", "1", owner="a"))
    cache.assume(claim("c1", "2", owner="b"))
    assert cache.by_index("owner", "a") == []
    assert [c["name"] for c in cache.by_index("owner", "b")] == ["c1"]
