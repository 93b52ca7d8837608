"""The assume cache overlays our own writes until the watch catches up."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

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
            st.sampled_from(["assume", "watch", "delete", "restore"]),
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
        else:
            cache.restore(Key("ns", f"c{n}"))
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
