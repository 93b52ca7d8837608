"""Property tests of the pod protocol's annotations: bad payloads give AnnotationError.

The claims annotation is written by users in any tool; the controllers parse it on every
pod event. Any text must give either entries or an ``AnnotationError`` that names the
annotation; well-formed entries must survive format -> parse unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.api.annotations import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    DEVICES_ANNOTATION,
    AnnotationError,
    PodResourceClaim,
    format_pod_claims,
    parse_claim_statuses,
    parse_pod_claims,
    parse_pod_devices,
)

from .mutations import JSON_VALUES, mutated
from .settings import FUZZ

PARSERS: Final[dict[str, Callable[[str | None], Any]]] = {
    CLAIMS_ANNOTATION: parse_pod_claims,
    CLAIM_STATUSES_ANNOTATION: parse_claim_statuses,
    DEVICES_ANNOTATION: parse_pod_devices,
}

SEEDS: Final[dict[str, list[dict[str, Any]]]] = {
    CLAIMS_ANNOTATION: [
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
        {"name": "shared", "resourceClaimName": "shared-gpu"},
    ],
    CLAIM_STATUSES_ANNOTATION: [
        {"name": "gpu", "resourceClaimName": "pod-gpu-abc12"},
        {"name": "none", "resourceClaimName": None},
    ],
    DEVICES_ANNOTATION: [
        {
            "name": "gpu",
            "resourceClaimName": "pod-gpu-abc12",
            "devices": [
                {"request": "gpu", "driver": "gpu.example.com", "pool": "n", "device": "gpu-0"}
            ],
            "config": [
                {"source": "FromClass", "opaque": {"driver": "gpu.example.com", "parameters": {}}}
            ],
        }
    ],
}


def _parse_or_annotation_error(annotation: str, text: str | None) -> Any:
    try:
        return PARSERS[annotation](text)
    except AnnotationError as exc:
        assert exc.annotation == annotation
        assert str(exc).startswith(f"annotation {annotation}: ")
        assert exc.problems and all(exc.problems)
        return None


def test_seeds_are_valid() -> None:
    for annotation, seed in SEEDS.items():
        assert len(PARSERS[annotation](json.dumps(seed))) == len(seed)


@FUZZ
@given(st.sampled_from(sorted(PARSERS)), st.one_of(st.none(), st.text(max_size=200)))
def test_random_text_gives_entries_or_annotation_error(annotation: str, text: str | None) -> None:
    _parse_or_annotation_error(annotation, text)


@FUZZ
@given(st.sampled_from(sorted(PARSERS)), JSON_VALUES)
def test_random_json_gives_entries_or_annotation_error(annotation: str, value: Any) -> None:
    _parse_or_annotation_error(annotation, json.dumps(value))


@FUZZ
@given(
    st.sampled_from(sorted(SEEDS)).flatmap(
        lambda annotation: st.tuples(st.just(annotation), mutated({"items": SEEDS[annotation]}))
    )
)
def test_mutated_payloads_give_entries_or_annotation_error(
    case: tuple[str, dict[str, Any]],
) -> None:
    annotation, wrapper = case
    _parse_or_annotation_error(annotation, json.dumps(wrapper.get("items")))


names: Final = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?\Z")


@FUZZ
@given(st.lists(st.tuples(names, st.booleans(), names), max_size=6, unique_by=lambda t: t[0]))
def test_valid_claims_round_trip(entries: list[tuple[str, bool, str]]) -> None:
    claims = [
        PodResourceClaim(
            name=name,
            resource_claim_name=target if by_name else None,
            resource_claim_template_name=None if by_name else target,
        )
        for name, by_name, target in entries
    ]
    text = format_pod_claims(claims)
    if not claims:
        assert parse_pod_claims(text) == ()
        return
    assert list(parse_pod_claims(text)) == claims


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"name": "gpu"}', "must be a JSON list"),
        ("[{'name': 'gpu'}]", "is not valid JSON"),
        ('[{"name": "gpu"}]', "exactly one of resourceClaimName or resourceClaimTemplateName"),
        ('[{"name": "Not A Label", "resourceClaimName": "x"}]', "[0].name"),
        (
            '[{"name": "a", "resourceClaimName": "x"}, {"name": "a", "resourceClaimName": "y"}]',
            "duplicate value 'a'",
        ),
        ("", "is empty"),
    ],
)
def test_malformed_claims_annotation_names_the_problem(text: str, problem: str) -> None:
    with pytest.raises(AnnotationError) as caught:
        parse_pod_claims(text)
    assert problem in str(caught.value)
    assert CLAIMS_ANNOTATION in str(caught.value)
