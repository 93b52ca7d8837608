"""Semantic versions (semver 2.0.0) as used by `version` device attributes.

Comparison follows semver precedence: numeric major.minor.patch, a pre-release sorts before
the release, pre-release identifiers compare numerically when both are numeric and
lexically otherwise, and build metadata is ignored. CEL's semver library and
matchAttribute both rely on this order.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Final

from operators.api import limits

_SEMVER_RE: Final = re.compile(limits.SEMVER_PATTERN)


@functools.total_ordering
@dataclass(frozen=True, slots=True)
class Semver:
    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()
    build: str = field(default="", compare=False)

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def parse(text: str) -> Semver:
        if not _SEMVER_RE.match(text):
            raise ValueError(f"{text!r} is not a semantic version (semver 2.0.0)")
        core, _, build = text.partition("+")
        core, _, pre = core.partition("-")
        major, minor, patch = (int(p) for p in core.split("."))
        prerelease: tuple[int | str, ...] = (
            tuple(int(p) if p.isdigit() else p for p in pre.split(".")) if pre else ()
        )
        return Semver(major, minor, patch, prerelease, build)

    def _key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        # A release (no pre-release) sorts after every pre-release of the same version;
        # numeric identifiers sort before alphanumeric ones.
        ids = tuple((0, p) if isinstance(p, int) else (1, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, ids)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(p) for p in self.prerelease)
        if self.build:
            text += "+" + self.build
        return text
