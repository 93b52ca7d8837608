"""The fault proxy: bytes pass both ways; a cut closes connections; lost answers reach the
server and never the client."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from robustness.proxy import Proxy


def closed(sock: socket.socket) -> bool:
    """The other side closed or reset the connection (no bytes come)."""
    try:
        return sock.recv(16) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def server() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server that records what it receives and answers each read with b"ok"."""
    received: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)

    def answer(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1024):
                received.append(data)
                conn.sendall(b"ok")

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], received
    listener.close()


def test_bytes_pass_and_a_cut_closes_the_connection(server: tuple[int, list[bytes]]) -> None:
    port, received = server
    proxy = Proxy("127.0.0.1", port)
    try:
        client = socket.create_connection(("127.0.0.1", proxy.start()), timeout=5)
        client.sendall(b"hello")
        assert client.recv(16) == b"ok"
        assert received == [b"hello"]
        assert proxy.cut() == 1
        assert closed(client), "the connection was not closed"
    finally:
        proxy.stop()


def test_lost_answers_reach_the_server_but_not_the_client(server: tuple[int, list[bytes]]) -> None:
    port, received = server
    proxy = Proxy("127.0.0.1", port)
    try:
        proxy.start()
        quiet = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        client.sendall(b"first")
        assert client.recv(16) == b"ok"
        losing = threading.Thread(target=proxy.lose_answers, args=(1.0,))
        losing.start()
        threading.Event().wait(0.1)
        client.sendall(b"write")
        assert closed(client), "an answer came back, or the connection stayed open"
        losing.join()
        assert received == [b"first", b"write"], "the request did not reach the server"
        quiet.sendall(b"quiet")  # a connection that sent nothing in the window is untouched
        assert quiet.recv(16) == b"ok"
        again = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        again.sendall(b"after")
        assert again.recv(16) == b"ok", "answers still lost after the window"
    finally:
        proxy.stop()


def test_a_partition_refuses_connections_until_it_ends(server: tuple[int, list[bytes]]) -> None:
    port, _ = server
    proxy = Proxy("127.0.0.1", port)
    try:
        proxy.start()
        open_one = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        cutting = threading.Thread(target=proxy.partition, args=(1.0,))
        cutting.start()
        threading.Event().wait(0.1)
        assert closed(open_one), "an open connection survived the partition"
        refused = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        refused.sendall(b"x")
        assert closed(refused), "a new connection got through the partition"
        cutting.join()
        after = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        after.sendall(b"after")
        assert after.recv(16) == b"ok"
    finally:
        proxy.stop()
