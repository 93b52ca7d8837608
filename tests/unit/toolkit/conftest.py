"""Snapshot fixtures for the toolkit tests (files under fixtures/, plus edited copies)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

FIXTURES = Path(__file__).resolve().parent / "fixtures"
INTREE = FIXTURES / "intree-cluster.yaml"


def load_items(path: Path = INTREE) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load(path.read_text())["items"]
    return items


@pytest.fixture
def write_snapshot(tmp_path: Path) -> Callable[..., Path]:
    """Write a List of the given items to a temporary file and return its path."""

    def write(items: list[dict[str, Any]], name: str = "snapshot.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
        return path

    return write


def find(items: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(i for i in items if i["kind"] == kind and i["metadata"]["name"] == name)
