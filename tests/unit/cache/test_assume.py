"""The assume cache overlays our own writes until the watch catches up."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.cache.assume import AssumeCache
from operators.cache.informer import Informer, Key
from operators.kube import RESOURCE_CLAIMS, JsonDict


def claim(
    name: str,
    rv: str,
    owner: str = "",
    uid: str = "",
    *,
    deleting: bool = False,
    finalizers: tuple[str, ...] = (),
) -> JsonDict:
    metadata: JsonDict = {
        "namespace": "ns",
        "name": name,
        "resourceVersion": rv,
        "uid": uid or f"u-{name}",
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    return {"metadata": metadata, "owner": owner, "rv": rv}


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


def test_lookup_reads_kept_index_values_not_every_assumed_object() -> None:
    calls: list[str] = []
    informer: Informer[dict[str, Any]] = Informer(None, RESOURCE_CLAIMS, parse)  # type: ignore[arg-type]
    cache = AssumeCache(informer)

    def owner(c: dict[str, Any]) -> list[str]:
        calls.append(c["name"])
        return [c["owner"]]

    cache.add_index("owner", owner)
    for i in range(50):
        cache.assume(claim(f"c{i}", "5", owner=f"pod-{i}"))
    calls.clear()
    for i in range(50):
        assert [c["name"] for c in cache.by_index("owner", f"pod-{i}")] == [f"c{i}"]
    assert calls == []  # 50 lookups over 50 assumptions ran no index function


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["assume", "watch", "delete", "restore", "gone"]),
            st.integers(0, 3),  # which claim
            st.integers(1, 9),  # resourceVersion
            st.sampled_from(["", "a", "b"]),  # owner
        ),
        max_size=30,
    )
)
def test_index_lookups_match_every_object_read_through_get(
    steps: list[tuple[str, int, int, str]],
) -> None:
    cache = make()
    for op, n, rv, owner in steps:
        raw = claim(f"c{n}", str(rv), owner=owner)
        if op == "assume":
            cache.assume(raw)
        elif op == "watch":
            event = "MODIFIED" if cache.informer.get(Key("ns", f"c{n}")) else "ADDED"
            cache.informer.apply(event, raw)
        elif op == "delete":
            if cache.informer.get(Key("ns", f"c{n}")) is not None:
                cache.informer.apply("DELETED", raw)
        elif op == "gone":  # our write dropped its last finalizer
            cache.assume(claim(f"c{n}", str(rv), owner=owner, deleting=True))
        else:
            cache.restore(Key("ns", f"c{n}"))
        seen = [obj for i in range(4) if (obj := cache.get(Key("ns", f"c{i}"))) is not None]
        assert sorted(cache.values(), key=lambda c: c["name"]) == seen
        for value in ("a", "b"):
            expected = []
            for i in range(4):
                obj = cache.get(Key("ns", f"c{i}"))
                if obj is not None and obj["owner"] == value:
                    expected.append(obj)
            assert cache.by_index("owner", value) == expected


def test_an_index_function_may_give_a_value_twice() -> None:
    informer: Informer[dict[str, Any]] = Informer(None, RESOURCE_CLAIMS, parse)  # type: ignore[arg-type]
    cache = AssumeCache(informer)
    cache.add_index("owner", lambda c: [c["owner"], c["owner"]])
    cache.assume(claim("c1", "5", owner="t"))
    assert [c["name"] for c in cache.by_index("owner", "t")] == ["c1"]
    cache.restore(Key("ns", "c1"))
    assert cache.by_index("owner", "t") == []


def test_an_older_answer_does_not_replace_a_newer_assumption() -> None:
    cache = make()
    cache.informer.apply("ADDED", claim("c1", "3"))
    cache.assume(claim("c1", "7", owner="new"))
    cache.assume(claim("c1", "6", owner="old"))  # answers may come back out of order
    assert cache.get(Key("ns", "c1"))["rv"] == "7"  # type: ignore[index]
    assert [c["rv"] for c in cache.by_index("owner", "new")] == ["7"]


def test_an_answer_that_dropped_the_last_finalizer_hides_the_object_until_the_watch_agrees() -> (
    None
):
    # The API server deletes instead of storing such a write: its answer carries the
    # deletion's resourceVersion, no newer than what the watch shows meanwhile (a claim
    # still held by the finalizer), so it could not win by version.
    cache = make()
    held = claim("c1", "5", owner="p", deleting=True, finalizers=("dralloc",))
    cache.informer.apply("ADDED", claim("c1", "4", owner="p", finalizers=("dralloc",)))
    cache.assume(held)
    cache.assume(claim("c1", "5", owner="p", deleting=True))  # the finalizer PATCH's answer
    assert cache.get(Key("ns", "c1")) is None
    assert cache.by_index("owner", "p") == []
    assert cache.values() == []
    cache.informer.apply("MODIFIED", held)  # the watch, a step behind
    assert cache.get(Key("ns", "c1")) is None
    assert cache.by_index("owner", "p") == []
    cache.assume(claim("c1", "3", owner="p"))  # an answer from before, out of order
    assert cache.get(Key("ns", "c1")) is None
    cache.informer.apply("DELETED", held)
    cache.informer.apply("ADDED", claim("c1", "9", owner="p", uid="another"))
    assert cache.get(Key("ns", "c1"))["rv"] == "9"  # type: ignore[index]


def test_a_new_object_under_a_removed_ones_name_is_seen() -> None:
    cache = make()
    cache.informer.apply("ADDED", claim("c1", "4", finalizers=("dralloc",)))
    cache.assume_gone(Key("ns", "c1"), "u-c1")
    assert cache.get(Key("ns", "c1")) is None
    cache.assume(claim("c1", "8", owner="q", uid="another"))  # created again, watch behind
    assert cache.get(Key("ns", "c1"))["rv"] == "8"  # type: ignore[index]
    assert [c["rv"] for c in cache.by_index("owner", "q")] == ["8"]


def test_an_answer_the_watch_has_passed_for_an_object_it_no_longer_holds_is_not_assumed() -> None:
    # Our PATCH went through at 5, the claim was deleted at 6, and the watch's DELETED was
    # handled before the PATCH's answer: assumed, the answer would be a claim that exists for
    # ever (nothing under the name comes again to clear it), holding its devices.
    cache = make()
    cache.informer.apply("ADDED", claim("c1", "4", owner="p"))
    cache.informer.apply("DELETED", claim("c1", "6", owner="p"))
    cache.assume(claim("c1", "5", owner="p"))
    assert cache.get(Key("ns", "c1")) is None
    assert cache.values() == []
    assert cache.by_index("owner", "p") == []
    # An answer the watch has not reached yet is still assumed.
    cache.assume(claim("c2", "7", owner="p"))
    assert [c["name"] for c in cache.by_index("owner", "p")] == ["c2"]


def test_removals_the_watch_has_shown_leave_no_record_behind() -> None:
    # Generated claims never come back under their name, so a record no event clears would
    # stay for ever: one per claim deleted while the watch was ahead of our answer.
    cache = make()
    for i in range(1000):
        name = f"c{i}"
        cache.informer.apply("ADDED", claim(name, str(10 * i + 1)))
        cache.informer.apply("DELETED", claim(name, str(10 * i + 2)))
        cache.assume_gone(Key("ns", name), f"u-{name}", str(10 * i + 2))  # the answer, late
    assert len(cache._gone) == 0
    assert cache.get(Key("ns", "c999")) is None


def test_removals_without_a_version_are_swept_once_the_watch_cannot_show_them(
    monkeypatch: Any,
) -> None:
    now = [1000.0]
    monkeypatch.setattr("operators.cache.assume.time.monotonic", lambda: now[0])
    cache = make()
    cache.informer.apply("ADDED", claim("held", "1"))
    cache.assume_gone(Key("ns", "held"), "u-held")  # the informer still holds it: kept
    for i in range(200):
        cache.assume_gone(Key("ns", f"c{i}"), f"u-c{i}")  # 404s for objects not in the cache
    assert cache.get(Key("ns", "c5")) is None
    now[0] += 301
    for i in range(200, 300):
        cache.assume_gone(Key("ns", f"c{i}"), f"u-c{i}")
    assert len(cache._gone) < 150  # the old ones went at a sweep
    assert cache.get(Key("ns", "held")) is None  # still hidden: its DELETED has not come


def test_removing_an_old_object_keeps_the_assumption_for_the_new_one_under_its_name() -> None:
    cache = make()
    cache.informer.apply("ADDED", claim("c1", "4", owner="p", uid="old"))
    cache.assume(claim("c1", "8", owner="q", uid="new"))  # created again, watch behind
    cache.assume_gone(Key("ns", "c1"), "old")  # a late answer for the old one
    assert cache.get(Key("ns", "c1"))["rv"] == "8"  # type: ignore[index]
    assert [c["rv"] for c in cache.by_index("owner", "q")] == ["8"]


def test_an_assumption_the_watch_passed_without_the_object_is_void() -> None:
    # The watch was down while our claim was created and deleted: the relist (or the
    # resumed watch) passes its version without it and names nothing about it.
    cache = make()
    cache.informer.apply("ADDED", claim("other", "90", owner="p"))
    cache.assume(claim("c1", "100", owner="p"))
    cache.assume(claim("c2", "100", owner="p"))
    cache.assume(claim("c3", "100", owner="p"))
    assert cache.get(Key("ns", "c1")) is not None
    cache.informer.apply("ADDED", claim("other2", "110"))  # the watch is past 100
    assert cache.get(Key("ns", "c1")) is None
    assert [c["name"] for c in cache.by_index("owner", "p")] == ["other"]
    assert [c["name"] for c in cache.values()] == ["other", "other2"]
    assert len(cache) == 0
    cache.assume(claim("c4", "120", owner="p"))  # one the watch has not reached stands
    assert [c["name"] for c in cache.by_index("owner", "p")] == ["c4", "other"]


def test_the_watch_showing_a_removed_object_late_keeps_the_new_ones_answer() -> None:
    cache = make()
    cache.informer.apply("ADDED", claim("c1", "4", owner="p", uid="old"))
    cache.assume(claim("c1", "8", owner="q", uid="new"))
    cache.assume_gone(Key("ns", "c1"), "old")
    cache.informer.apply("MODIFIED", claim("c1", "5", owner="p", uid="old"))  # behind
    assert cache.get(Key("ns", "c1"))["rv"] == "8"  # type: ignore[index]
    cache.informer.apply("DELETED", claim("c1", "6", owner="p", uid="old"))
    assert cache.get(Key("ns", "c1"))["rv"] == "8"  # type: ignore[index]
    assert [c["rv"] for c in cache.by_index("owner", "q")] == ["8"]
    cache.informer.apply("ADDED", claim("c1", "8", owner="q", uid="new"))
    assert not cache.is_assumed(Key("ns", "c1"))
    assert cache.get(Key("ns", "c1"))["rv"] == "8"  # type: ignore[index]
