"""The testbed's scripts (``testbed/*.py``) loaded by path, for the tests that drive them.

They are programs, not a package: each imports its siblings (``procs``, ``realnode``,
``ociimage``) as top-level modules, so their directory must be on ``sys.path``; and their
dataclasses look their own module up in ``sys.modules`` while being built, so the module is
registered there before it runs. Each call gives a fresh module, so a test may patch its copy
without leaking into another test's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTBED_DIR = Path(__file__).resolve().parents[1] / "testbed"


def load_testbed_script(stem: str, module_name: str | None = None) -> ModuleType:
    """A fresh copy of ``testbed/<stem>.py``, registered as ``module_name`` (default
    ``testbed_<stem>``)."""
    if str(TESTBED_DIR) not in sys.path:
        sys.path.insert(0, str(TESTBED_DIR))
    name = module_name or f"testbed_{stem}"
    spec = importlib.util.spec_from_file_location(name, TESTBED_DIR / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
