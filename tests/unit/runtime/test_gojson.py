"""operators.gojson against Go itself: go_encoding.json was written by encoding/json
(go_encoding.go beside it)."""

from __future__ import annotations

import datetime
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from operators import gojson
from operators.kube import decode_json

REFERENCE: dict[str, Any] = json.loads(
    (Path(__file__).parent / "go_encoding.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize("case", REFERENCE["floats"], ids=lambda c: c["in"])
def test_floats_are_written_as_go_writes_a_float64(case: dict[str, str]) -> None:
    number = float(case["in"])
    assert gojson.go_float(number) == case["out"]
    # Alone and inside a document (orjson's text of it is replaced).
    assert gojson.dumps(number).decode() == case["out"]
    assert gojson.dumps({"v": [number]}).decode() == '{"v":[' + case["out"] + "]}"


@pytest.mark.parametrize("case", REFERENCE["codepoints"], ids=lambda c: c["in"])
def test_each_character_is_written_as_go_writes_it(case: dict[str, str]) -> None:
    char = chr(int(case["in"]))
    assert gojson.dumps(char).decode() == case["out"]
    assert gojson.dumps({char: 1}).decode() == "{" + case["out"] + ":1}"


def test_a_claim_read_from_the_api_server_is_written_back_as_a_go_client_writes_it() -> None:
    # Go wrote it from the same text read as Kubernetes' unstructured decoder reads it:
    # escapes, non-ASCII, floats in both notations, a whole float, the largest int64.
    document = decode_json(REFERENCE["document"])
    assert gojson.dumps(document).decode() == REFERENCE["documentWritten"]


def test_what_orjson_refuses_is_written_as_read() -> None:
    beyond = 2**64
    text = gojson.dumps({"big": beyond, "small": -(2**63) - 1, "max": 2**64 - 1, "x": 0.5})
    assert text == b'{"big":18446744073709551616,"small":-9223372036854775809,' + (
        b'"max":18446744073709551615,"x":0.5}'
    )
    assert decode_json(text) == {"big": beyond, "small": -(2**63) - 1, "max": 2**64 - 1, "x": 0.5}
    # A lone surrogate (a JSON escape of one) stays an escape: it has no UTF-8.
    assert gojson.dumps({"a": "\ud800<"}) == b'{"a":"\\ud800\\u003c"}'
    # NaN has no JSON (the API server never sends one): null, whichever path writes it.
    assert gojson.dumps({"a": math.nan}) == b'{"a":null}'
    assert gojson.dumps({"a": [math.inf, 0.5]}) == b'{"a":[null,0.5]}'


def test_every_document_reads_back_as_it_was() -> None:
    chooser = random.Random(7)
    alphabet = ["a", "é", "<", "&", "\u2028", "\n", "\x00", '"', "\\", "1", ".", ":", "😀"]

    def text() -> str:
        return "".join(chooser.choice(alphabet) for _ in range(chooser.randrange(6)))

    def value(depth: int) -> Any:
        kind = chooser.randrange(6 if depth < 4 else 4)
        if kind == 0:
            return text()
        if kind == 1:
            return chooser.choice([0, -1, 7, 2**63 - 1, -(2**63), 2**70])
        if kind == 2:
            return chooser.choice([0.5, 1e-7, 1e21, 2.0, -0.0, 123456.789, 1e-6])
        if kind == 3:
            return chooser.choice([True, False, None])
        if kind == 4:
            return {text(): value(depth + 1) for _ in range(chooser.randrange(4))}
        return [value(depth + 1) for _ in range(chooser.randrange(4))]

    for _ in range(500):
        document = {"d": value(0)}
        written = gojson.dumps(document)
        assert json.loads(written) == document
        assert not any(raw in written for raw in (b"<", b">", b"&", "\u2028".encode()))


def test_a_key_no_fragment_can_stand_for_is_written_as_json_writes_it() -> None:
    """A key with a lone surrogate (from an escape in a user's parameters) or a key that is
    no string: written by ``json`` instead of failing the write, still UTF-8 and escaped."""
    assert gojson.dumps({"\ud800": "é<"}) == '{"\\ud800":"é\\u003c"}'.encode()
    assert gojson.dumps({1: 0.5}) == b'{"1":0.5}'


def test_a_lone_surrogate_is_escaped_alone() -> None:
    assert gojson.dumps({"a": "\ud800é\u2028"}) == '{"a":"\\ud800é\\u2028"}'.encode()


def test_nesting_deeper_than_orjson_takes_is_written_all_the_same() -> None:
    for depth in (300, 600):
        nested: Any = 2.5
        for _ in range(depth):
            nested = [nested]
        assert json.loads(gojson.dumps({"deep": nested})) == {"deep": nested}


def test_what_json_refused_is_still_refused() -> None:
    """A datetime or a dataclass in a body is a caller's mistake: refused, as ``json`` did,
    rather than sent in orjson's notation."""
    with pytest.raises(TypeError):
        gojson.dumps({"at": datetime.datetime(2026, 12, 7)})


def test_a_version_inside_a_string_keeps_the_quick_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pod's image has a tag like "pause:3.10": no float, so orjson's text as is."""

    def slower(value: Any) -> bytes:
        raise AssertionError("the exact path, for a document without floats")

    monkeypatch.setattr(gojson, "_exactly", slower)
    pod = {"spec": {"containers": [{"image": "registry.k8s.io/pause:3.10", "args": ["-v:2.5"]}]}}
    assert gojson.dumps(pod) == json.dumps(pod, separators=(",", ":")).encode()


def test_json_inside_a_string_keeps_the_quick_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocated-by annotation on every pod dralloc allocates holds JSON with a float."""

    def slower(value: Any) -> bytes:
        raise AssertionError("the exact path, for a document without floats")

    monkeypatch.setattr(gojson, "_exactly", slower)
    record = json.dumps({"at": 1765432100.125, "holder": "op-1", "term": 3}, separators=(",", ":"))
    pod = {"metadata": {"annotations": {"resource.dralloc.dev/allocated-by": record}}}
    assert gojson.dumps(pod) == json.dumps(pod, separators=(",", ":")).encode()
    inner = {"a": '\\\\\\":2.5'}  # backslashes, then an escaped quote: still in the string
    assert gojson.dumps(inner) == json.dumps(inner, separators=(",", ":")).encode()


@pytest.mark.parametrize("key", ["a\\", "a\\\\", '\\"'])
def test_a_float_after_a_key_that_ends_in_a_backslash_is_still_found(key: str) -> None:
    """A key's closing quote follows an even run of backslashes (each one escaped)."""
    # Both written otherwise by orjson ("1.0", "1e+20").
    assert gojson.dumps({key: 1.0}) == b"{" + json.dumps(key).encode() + b":1}"
    assert gojson.dumps({key: 1e20}) == b"{" + json.dumps(key).encode() + b":100000000000000000000}"


@pytest.mark.parametrize("number", [1e-7, 2.5, -3e21])
def test_a_float_anywhere_is_still_found(number: float) -> None:
    written = gojson.go_float(number).encode()
    assert gojson.dumps({"v": number}) == b'{"v":' + written + b"}"
    assert (
        gojson.dumps({"a": "x:1.5", "v": [1, number]}) == b'{"a":"x:1.5","v":[1,' + written + b"]}"
    )
    assert gojson.dumps(number) == written
