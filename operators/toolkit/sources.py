"""Read Kubernetes objects from snapshot files: YAML or JSON, single or multi-document,
``kind: List`` (what ``kubectl get -o yaml`` prints), or directories of such files.

Only reading and flattening happens here, so that a bad file fails with its name before any
object is interpreted. Each object keeps an ``ObjectRef`` saying which file and which
document it came from; later errors reuse it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from operators.toolkit.usererrors import ObjectRef, SnapshotError

SNAPSHOT_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class RawObject:
    """One Kubernetes object as read, with where it came from."""

    ref: ObjectRef
    body: Mapping[str, Any]

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion", ""))

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))


def snapshot_files(paths: Sequence[str | Path]) -> list[Path]:
    """The files to read: files as given, directories searched recursively, sorted."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix in SNAPSHOT_SUFFIXES
            )
            if not found:
                raise SnapshotError(str(path), "directory holds no .yaml, .yml or .json file")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise SnapshotError(str(path), "no such file or directory")
    return files


def read_objects(paths: Sequence[str | Path]) -> list[RawObject]:
    """Every object of every snapshot file, Lists flattened, in file order."""
    objects: list[RawObject] = []
    for path in snapshot_files(paths):
        objects.extend(read_file(path))
    return objects


def read_file(path: Path) -> list[RawObject]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(str(path), f"cannot read: {exc}") from exc
    return list(_flatten(str(path), _parse_documents(str(path), text)))


def objects_from_documents(source: str, documents: Iterable[Any]) -> list[RawObject]:
    """The same flattening for documents obtained elsewhere (a live cluster read)."""
    return list(_flatten(source, documents))


def _parse_documents(source: str, text: str) -> list[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return [json.loads(text)]
        except json.JSONDecodeError as exc:
            raise SnapshotError(
                source, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from exc
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        context, started = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and started:
            problem += (
                f" ({context} started at line {started.line + 1}, column {started.column + 1})"
            )
        raise SnapshotError(source, f"invalid YAML{where}: {problem}") from exc


def _flatten(source: str, documents: Iterable[Any]) -> Iterator[RawObject]:
    position = 0
    for document in documents:
        items: Iterable[Any]
        if isinstance(document, list):
            items = document
        elif _is_list(document):
            items = document.get("items") or []
            if not isinstance(items, list):
                position += 1
                raise SnapshotError(ObjectRef(source, position), "items must be a list")
        else:
            items = [document]
        for item in items:
            position += 1
            ref = ObjectRef(source, position)
            if not isinstance(item, Mapping):
                raise SnapshotError(ref, f"expected an object, found {type(item).__name__}")
            meta = item.get("metadata")
            if meta is not None and not isinstance(meta, Mapping):
                raise SnapshotError(ref, "must be an object", field="metadata")
            meta = meta or {}
            ref = ObjectRef(
                source,
                position,
                kind=str(item.get("kind", "")),
                namespace=meta.get("namespace"),
                name=meta.get("name"),
            )
            for key in ("apiVersion", "kind"):
                if not isinstance(item.get(key), str) or not item.get(key):
                    raise SnapshotError(ref, "required value", field=key)
            yield RawObject(ref, item)


def _is_list(document: Any) -> bool:
    return (
        isinstance(document, Mapping)
        and isinstance(document.get("kind"), str)
        and document["kind"].endswith("List")
        and "items" in document
    )
