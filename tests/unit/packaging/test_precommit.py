"""The pre-commit hooks run exactly the checks of `make lint` (which `make test` and CI run):
a check added to one and not the other would let commits pass that CI refuses."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def make_lint_commands() -> set[str]:
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^lint: .*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe, "no lint target in the Makefile"
    return {line.strip().replace("$(BIN)/", ".venv/bin/") for line in recipe.group(1).splitlines()}


def test_hooks_are_the_lint_target() -> None:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert all(repo["repo"] == "local" for repo in config["repos"]), "no hooks fetched from afar"
    assert all(hook["language"] == "system" and not hook["pass_filenames"] for hook in hooks)
    assert {hook["entry"] for hook in hooks} == make_lint_commands()
