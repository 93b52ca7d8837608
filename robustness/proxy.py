"""A TCP proxy between the operators and kube-apiserver, for the faults of a flaky network.

The operators reach the API server through it (their kubeconfig names the proxy's port; the
server's certificate is for 127.0.0.1, so TLS is verified as before). The faults it makes:

- ``cut``: every open connection closed at once, mid-request or mid-watch.
- ``lose_answers``: for a while, every request sent reaches the server, but its answer is
  dropped and its connection cut half a second later: writes land and their answers are
  lost, the case an operator cannot tell from a write that never landed. Watches that send
  nothing go on, so the operator keeps deciding (and writing) meanwhile.
- ``partition``: for a while, every connection is cut and new ones are refused: the API
  server is unreachable from the operators only (their Lease runs out).

It runs on its own event loop in a thread, so a run's own loop never waits on it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

CHUNK = 64 * 1024
LOST_ANSWER_CUT = 0.5
"""Seconds a connection whose answer was lost stays open before it is cut."""


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.cuts = 0
        self.doomed_total = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="robustness-proxy", daemon=True
        )
        self._server: asyncio.Server | None = None
        self._open: dict[asyncio.StreamWriter, asyncio.StreamWriter | None] = {}
        """Each open connection: its client side and its server side (None while connecting)."""
        self._refusing = False
        """New connections are refused (a partition)."""
        self._losing = False
        """Requests sent now lose their answers."""
        self._doomed: set[asyncio.StreamWriter] = set()
        """Client sides of connections whose answers are dropped until they are cut."""

    def start(self) -> int:
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self.port

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            self._cut()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def cut(self) -> int:
        """Close every connection now; returns how many there were."""
        return asyncio.run_coroutine_threadsafe(self._cut_async(), self._loop).result(10)

    def lose_answers(self, seconds: float) -> int:
        """For ``seconds``, requests go through and their answers are lost; returns how many
        connections lost one."""
        self.doomed_total = 0
        self._loop.call_soon_threadsafe(setattr, self, "_losing", True)
        threading.Event().wait(seconds)
        self._loop.call_soon_threadsafe(setattr, self, "_losing", False)
        threading.Event().wait(LOST_ANSWER_CUT + 0.1)
        return self.doomed_total

    def partition(self, seconds: float) -> int:
        """Cut every connection and refuse new ones for ``seconds``; returns how many were cut."""
        self._loop.call_soon_threadsafe(setattr, self, "_refusing", True)
        cut = self.cut()
        threading.Event().wait(seconds)
        self._loop.call_soon_threadsafe(setattr, self, "_refusing", False)
        return cut

    async def _cut_async(self) -> int:
        return self._cut()

    def _cut(self) -> int:
        count = len(self._open)
        for client, server in list(self._open.items()):
            for writer in (client, server):
                if writer is not None:
                    writer.transport.abort()
        self._open.clear()
        self.cuts += 1
        return count

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        if self._refusing:
            client_writer.transport.abort()
            return
        # Counted from the start: a cut while the server side is being connected ends it too.
        self._open[client_writer] = None
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            self._open.pop(client_writer, None)
            client_writer.transport.abort()
            return
        if client_writer not in self._open:  # cut meanwhile
            server_writer.transport.abort()
            return
        self._open[client_writer] = server_writer
        await asyncio.gather(
            self._pump(client_reader, server_writer, client=client_writer),
            self._pump(server_reader, client_writer),
            return_exceptions=True,
        )
        self._open.pop(client_writer, None)
        self._doomed.discard(client_writer)
        for writer in (client_writer, server_writer):
            writer.transport.abort()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        client: asyncio.StreamWriter | None = None,
    ) -> None:
        """Bytes from ``reader`` to ``writer``; ``client`` is given for the request direction
        (it names the connection a request sent while answers are lost dooms)."""
        while True:
            data = await reader.read(CHUNK)
            if not data:
                writer.transport.abort()
                return
            if client is not None and self._losing and client not in self._doomed:
                self._doomed.add(client)
                self.doomed_total += 1
                self._loop.call_later(LOST_ANSWER_CUT, client.transport.abort)
            if client is None and writer in self._doomed:
                continue  # an answer lost on the way back
            writer.write(data)
            await writer.drain()


def proxied_kubeconfig(kubeconfig: Path, port: int, out: Path) -> Path:
    """A copy of ``kubeconfig`` whose clusters point at the proxy on ``port``."""
    config: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    for cluster in config.get("clusters") or ():
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    out.write_text(json.dumps(config, indent=2))
    out.chmod(0o600)
    return out


def api_server_address(kubeconfig: Path) -> tuple[str, int]:
    """The host and port of the (first) cluster's server in ``kubeconfig``."""
    config: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    server = urlsplit(config["clusters"][0]["cluster"]["server"])
    return server.hostname or "127.0.0.1", server.port or 443
