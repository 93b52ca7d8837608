"""The API groups' names have one home (operators/groups.py); everything else imports them, and
the toolkit asks the pod protocol what a mode does instead of comparing group names."""

from __future__ import annotations

import ast
from pathlib import Path

import operators
from operators.groups import API_GROUPS

PACKAGE = Path(operators.__file__).parent
HOME = PACKAGE / "groups.py"


def literal_group_names(path: Path) -> list[int]:
    """Lines of string constants that are exactly a group's name (docstrings and messages that
    mention one are sentences, not the name alone)."""
    tree = ast.parse(path.read_text(), str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in API_GROUPS
    ]


def test_the_group_names_are_written_in_one_module_only() -> None:
    found = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != HOME and (lines := literal_group_names(path))
    }
    assert found == {}, f"group names written outside operators/groups.py: {found}"
    assert literal_group_names(HOME), "operators/groups.py no longer names the groups"


def test_the_toolkit_never_compares_group_names() -> None:
    """A mode's behaviour comes from PodProtocol (operators.api.podprotocol), not from
    comparing a group with KUBERNETES_GROUP or GROUP."""
    offenders = []
    for path in sorted((PACKAGE / "toolkit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare) and any(
                isinstance(side, ast.Name) and side.id in {"GROUP", "KUBERNETES_GROUP"}
                for side in (node.left, *node.comparators)
            ):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
