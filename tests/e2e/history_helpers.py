"""The robustness suite's recorder and checker for one e2e test: every change of the claims
and pods of the test's namespaces, and whether a rule was broken at any moment.

An e2e test states what it saw at the end; "no device in two claims" must hold at every
revision in between too. ``recording(testbed, namespaces)`` watches from before the test
acts until it asks for the history; ``history()`` first touches an object of each kind and
waits until the watches have seen the touch, so everything before it is in the history (no
fixed sleep).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from operators.kube import PODS, RESOURCE_CLAIMS, KubeClient
from robustness.checker import Report, check
from robustness.history import History, Kind
from robustness.recorder import Recorder

from .kube_helpers import Testbed

SEEN_TIMEOUT_S = 60.0


class Recording:
    """A recorder on its own event loop in a thread, over some namespaces."""

    def __init__(self, testbed: Testbed, namespaces: Sequence[str]) -> None:
        self.testbed = testbed
        self.namespaces = frozenset(namespaces)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.recorder: Recorder | None = None
        self.client: KubeClient | None = None
        self.task: asyncio.Future[Any] | None = None

    def start(self) -> None:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=30)

    async def _start(self) -> None:
        self.client = await KubeClient.connect(
            str(self.testbed.kubeconfig), user_agent="dralloc-e2e-history",
            api_group=self.testbed.api_mode.group,
        )  # fmt: skip
        kinds: dict[Kind, Any] = {"claim": RESOURCE_CLAIMS, "pod": PODS}
        self.recorder = Recorder(self.client, kinds, keep=lambda ns: ns in self.namespaces)
        self.task = asyncio.ensure_future(self.recorder.run())

    def history(self, claim: tuple[str, str], pod: tuple[str, str]) -> History:
        """Everything up to now: a claim and a pod of the namespaces (``(namespace, name)``)
        are touched, and the history is taken once both touches are recorded."""
        return asyncio.run_coroutine_threadsafe(self._history(claim, pod), self.loop).result(
            timeout=SEEN_TIMEOUT_S + 10
        )

    async def _history(self, claim: tuple[str, str], pod: tuple[str, str]) -> History:
        assert self.client is not None and self.recorder is not None
        wanted: dict[Kind, int] = {}
        marks: list[tuple[Kind, Any, tuple[str, str]]] = [
            ("claim", RESOURCE_CLAIMS, claim), ("pod", PODS, pod),
        ]  # fmt: skip
        for kind, resource, (namespace, name) in marks:
            touched = await self.client.merge_patch(
                resource, name, {"metadata": {"labels": {"e2e-history-mark": "seen"}}},
                namespace=namespace,
            )  # fmt: skip
            wanted[kind] = int(touched["metadata"]["resourceVersion"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SEEN_TIMEOUT_S
        while any(self.recorder.last_rv[kind] < rv for kind, rv in wanted.items()):
            if loop.time() > deadline:
                raise AssertionError(f"the recorder did not see the marks: {self.recorder.last_rv}")
            await asyncio.sleep(0.2)
        return self.recorder.history(settled=False)

    def stop(self) -> None:
        async def _stop() -> None:
            if self.task is not None:
                self.task.cancel()
            if self.client is not None:
                await self.client.close()

        asyncio.run_coroutine_threadsafe(_stop(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


@contextmanager
def recording(testbed: Testbed, namespaces: Sequence[str]) -> Iterator[Recording]:
    """Record the namespaces' claims and pods from now until the block ends."""
    recorder = Recording(testbed, namespaces)
    recorder.start()
    try:
        yield recorder
    finally:
        recorder.stop()


def judged(history: History) -> Report:
    """The checker's verdict on the history (rules that need a settled end are left out)."""
    return check(history)
