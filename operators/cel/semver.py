"""Semantic versions (semver 2.0.0) as the Kubernetes CEL semver library sees them.

Strict parsing follows the semver grammar: ``MAJOR.MINOR.PATCH`` without
leading zeros, optional ``-prerelease`` and ``+build``. The relaxed form
(``semver(s, true)``) first drops a leading ``v``, fills in a missing minor or
patch with 0 and strips leading zeros, like upstream's normalising parser.
"""

from __future__ import annotations

import re
from functools import lru_cache

_NUM = r"(?:0|[1-9][0-9]*)"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER_RE = re.compile(
    rf"^(?P<major>{_NUM})\.(?P<minor>{_NUM})\.(?P<patch>{_NUM})"
    rf"(?:-(?P<pre>{_PRE_ID}(?:\.{_PRE_ID})*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
_LOOSE_CORE_RE = re.compile(r"^([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?(.*)$", re.DOTALL)


class Semver:
    """An immutable semantic version with semver precedence ordering (build ignored)."""

    __slots__ = ("_key", "build", "major", "minor", "patch", "prerelease")

    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...]
    build: tuple[str, ...]

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
        # Precedence key: a release sorts after its pre-releases; numeric
        # identifiers sort before alphanumeric ones.
        pre_key = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in prerelease)
        self._key = (major, minor, patch, 0 if prerelease else 1, pre_key)

    @classmethod
    def parse(cls, text: str, normalize: bool = False) -> Semver:
        """Parse ``text``; ValueError if it is not a valid version."""
        return _parse(text, normalize)

    def compare(self, other: Semver) -> int:
        return (self._key > other._key) - (self._key < other._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self._key == other._key

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
    m = _SEMVER_RE.match(text)
    if m is None:
        raise ValueError(f"invalid semantic version: {text!r}")
    pre: tuple[int | str, ...] = ()
    if m.group("pre"):
        pre = tuple(int(p) if p.isdigit() else p for p in m.group("pre").split("."))
    build = tuple(m.group("build").split(".")) if m.group("build") else ()
    return Semver(int(m.group("major")), int(m.group("minor")), int(m.group("patch")), pre, build)


@lru_cache(maxsize=2048)
def _parse(text: str, normalize: bool) -> Semver:
    if not normalize:
        return _strict(text)
    loose = text[1:] if text.startswith("v") else text
    m = _LOOSE_CORE_RE.match(loose)
    if m is None:
        raise ValueError(f"invalid semantic version: {text!r}")
    major, minor, patch, rest = m.group(1), m.group(2) or "0", m.group(3) or "0", m.group(4)
    return _strict(f"{int(major)}.{int(minor)}.{int(patch)}{rest}")
