from __future__ import annotations

import json
from pathlib import Path

import pytest

from operators.toolkit.sources import read_objects
from operators.toolkit.usererrors import SnapshotError

from .conftest import FIXTURES, INTREE


def test_a_kubectl_list_is_flattened_with_positions() -> None:
    objects = read_objects([INTREE])
    kinds = [o.kind for o in objects]
    assert kinds.count("ResourceSlice") == 3
    assert kinds[0] == "Namespace"
    assert [o.ref.document for o in objects] == list(range(1, len(objects) + 1))
    trainer = next(o for o in objects if o.ref.name == "trainer" and o.kind == "Pod")
    assert trainer.ref.namespace == "team-a"
    assert str(trainer.ref).startswith(f"{INTREE} (object #")


def test_multi_document_yaml_json_and_directories(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: one}\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: two}\n"
    )
    (tmp_path / "sub" / "b.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "three"}})
    )
    (tmp_path / "notes.txt").write_text("not a snapshot")
    names = [o.ref.name for o in read_objects([tmp_path])]
    assert names == ["one", "two", "three"]


def test_invalid_yaml_names_the_file_and_line() -> None:
    with pytest.raises(SnapshotError) as caught:
        read_objects([FIXTURES / "bad-syntax.yaml"])
    message = str(caught.value)
    assert "bad-syntax.yaml" in message
    assert "invalid YAML at line 5" in message
    assert "flow sequence started at line 4, column 9" in message


def test_object_without_kind_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nokind.yaml"
    path.write_text("apiVersion: v1\nmetadata: {name: x}\n")
    with pytest.raises(SnapshotError, match=r"nokind.yaml \(object #1\): x: kind: required value"):
        read_objects([path])


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="no such file or directory"):
        read_objects([tmp_path / "absent.yaml"])
    with pytest.raises(SnapshotError, match=r"holds no \.yaml"):
        read_objects([tmp_path])
