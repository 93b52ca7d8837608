"""Claim specs are compiled once per distinct spec, found by identity or by JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.allocator import compiled
from operators.allocator.compiled import ClaimSpecParts, SpecCache, compile_claim
from operators.api import parse_object


def claim(name: str, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.dralloc.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {
            "devices": {
                "requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": count}}]
            }
        },
    }


def test_equal_specs_are_compiled_once_and_claims_keep_their_own_metadata(monkeypatch: Any) -> None:
    calls: list[object] = []
    real = compiled._compile_spec

    def counted(spec: Mapping[str, Any]) -> ClaimSpecParts:
        calls.append(spec)
        return real(spec)

    monkeypatch.setattr(compiled, "_compile_spec", counted)
    cache = SpecCache()
    a, b = parse_object(claim("a")), parse_object(claim("b"))
    first, second = compile_claim(a, cache), compile_claim(b, cache)
    assert len(calls) == 1
    assert first.requests is second.requests
    names = (first.name, second.name, second.uid, second.resource_version)
    assert names == ("a", "b", "uid-b", "7")
    other = compile_claim(parse_object(claim("c", count=2)), cache)
    assert len(calls) == 2 and other.requests[0].exactly is not None
    assert other.requests[0].exactly.count == 2


def test_a_spec_is_found_by_identity_without_serializing_it(monkeypatch: Any) -> None:
    cache = SpecCache()
    model = parse_object(claim("a"))
    compile_claim(model, cache)
    assert cache.by_identity[id(model.spec)][0] is model.spec
    serialized: list[object] = []

    class Spy:
        @staticmethod
        def to_json(*args: Any, **kwargs: Any) -> bytes:
            serialized.append(args)
            return b""

    monkeypatch.setattr(type(model.spec), "__pydantic_serializer__", Spy)
    again = compile_claim(model, cache)
    assert serialized == [] and again.requests[0].name == "r"


def test_a_reused_id_is_not_mistaken_for_the_spec_it_held() -> None:
    cache = SpecCache()
    model = parse_object(claim("a"))
    cache.by_identity[id(model.spec)] = (object(), cache.by_json.get(b"", ((), (), ())))
    assert compile_claim(model, cache).requests[0].name == "r"
