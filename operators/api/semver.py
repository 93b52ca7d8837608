"""Semantic versions (semver 2.0.0): `version` device attributes and CEL's semver library.

One type serves the API models, the allocator's matchAttribute and CEL (`semver("1.2.3")`,
`compareTo`, `major()`, ...), so a version compares the same way everywhere. Comparison
follows semver precedence: numeric major.minor.patch, a pre-release sorts before the
release, pre-release identifiers compare numerically when both are numeric and lexically
otherwise, and build metadata is ignored.

Strict parsing uses the same grammar as the CRD schema (`limits.SEMVER_PATTERN`). The
relaxed form (CEL's `semver(s, true)`) first drops a leading `v`, fills in a missing minor
or patch with 0 and strips leading zeros, like Kubernetes' normalising parser.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from operators.api import limits

__all__ = ["Semver"]

_SEMVER_RE: Final = re.compile(limits.SEMVER_PATTERN)
_LOOSE_CORE_RE: Final = re.compile(r"([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?(.*)", re.DOTALL)

PrecedenceKey = tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]


class Semver:
    """An immutable semantic version, ordered by semver precedence (build ignored)."""

    __slots__ = ("_key", "build", "major", "minor", "patch", "prerelease")

    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...]
    build: tuple[str, ...]
    _key: PrecedenceKey

    def __init__(
        self,
        major: int,
        minor: int,
        patch: int,
        prerelease: tuple[int | str, ...] = (),
        build: tuple[str, ...] = (),
    ) -> None:
        self.major, self.minor, self.patch = major, minor, patch
        self.prerelease, self.build = prerelease, build
        # Computed once: selectors and matchAttribute compare the same versions many times.
        # A release sorts after its pre-releases; numeric identifiers sort before
        # alphanumeric ones.
        pre_key = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in prerelease)
        self._key = (major, minor, patch, 0 if prerelease else 1, pre_key)

    @staticmethod
    def parse(text: str, normalize: bool = False) -> Semver:
        """Parse `text` (relaxed with `normalize`); ValueError if it is not a version."""
        return _parse(text, normalize)

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by precedence (CEL's compareTo)."""
        return (self._key > other._key) - (self._key < other._key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __lt__(self, other: Semver) -> bool:
        return self._key < other._key

    def __le__(self, other: Semver) -> bool:
        return self._key <= other._key

    def __gt__(self, other: Semver) -> bool:
        return self._key > other._key

    def __ge__(self, other: Semver) -> bool:
        return self._key >= other._key

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(p) for p in self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"


def _strict(text: str) -> Semver:
    if _SEMVER_RE.fullmatch(text) is None:
        raise ValueError(f"{text!r} is not a semantic version (semver 2.0.0)")
    core, _, build = text.partition("+")
    core, _, pre = core.partition("-")
    major, minor, patch = (int(part) for part in core.split("."))
    prerelease = tuple(int(p) if p.isdigit() else p for p in pre.split(".")) if pre else ()
    return Semver(major, minor, patch, prerelease, tuple(build.split(".")) if build else ())


@lru_cache(maxsize=4096)
def _parse(text: str, normalize: bool) -> Semver:
    if not normalize:
        return _strict(text)
    loose = _LOOSE_CORE_RE.fullmatch(text.removeprefix("v"))
    if loose is None:
        raise ValueError(f"{text!r} is not a semantic version (semver 2.0.0)")
    major, minor, patch, rest = loose.group(1), loose.group(2), loose.group(3), loose.group(4)
    return _strict(f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}{rest}")
