"""Control sockets: one Unix stream socket per agent, one JSON object per line each way.

A request is {"op": NAME, ...}; the reply is {"ok": true, ...} or {"ok": false,
"error": TEXT}. The socket lives in the host's filesystem (shared by every namespace), so
the CLI reaches an agent without entering its namespace.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Callable

from rocelab import paths

Handler = Callable[[dict], dict]


def socket_path(lab: str, node: str) -> Path:
    return paths.STATE_DIR / lab / f"{node}.sock"


def log_path(lab: str, node: str) -> Path:
    return paths.STATE_DIR / lab / f"{node}.log"


class AgentUnreachable(OSError):
    pass


def request(path: Path, op: str, timeout_s: float = 5.0, **fields: Any) -> dict:
    """Send one request on a connection of its own, wait for its reply."""
    with Connections() as connections:
        return connections.request(path, op, timeout_s, **fields)


class Connections:
    """Connections to agents kept open from one request to the next. A connection per request
    costs the agent two more turns of its loop (to accept it, and to see it closed) between its
    due events: a sampler asked every agent 20 times a second, so a nicd serving 24 hosts' NICs
    took 1,440 turns a second for them, 960 only to connect. A kept connection that breaks (the
    agent restarted) is opened again, once."""

    def __init__(self) -> None:
        self.open: dict[Path, socket.socket] = {}

    def request(self, path: Path, op: str, timeout_s: float = 5.0, **fields: Any) -> dict:
        line = json.dumps({"op": op, **fields}).encode() + b"\n"
        while True:  # at most twice: a kept connection that broke is followed by a fresh one
            kept = path in self.open
            try:
                data = self._exchange(path, line, timeout_s)
                break
            except OSError as exc:
                self.drop(path)
                if not kept or isinstance(exc, TimeoutError):  # a busy agent is not asked twice as long
                    raise AgentUnreachable(f"agent at {path} did not answer {op!r}: {exc}") from None
        reply = json.loads(data)
        if not reply.get("ok"):
            raise RuntimeError(f"agent at {path} refused {op!r}: {reply.get('error', 'no reply')}")
        return reply

    def _exchange(self, path: Path, line: bytes, timeout_s: float) -> bytes:
        sock = self.open.get(path)
        if sock is None:
            sock = self.open[path] = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout_s)
            sock.connect(str(path))
        else:
            sock.settimeout(timeout_s)
        sock.sendall(line)
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:  # the agent closed it (stopped, or restarted since the last request)
                raise ConnectionResetError("the agent closed the connection before its reply")
            data += chunk
        return data

    def drop(self, path: Path) -> None:
        sock = self.open.pop(path, None)
        if sock is not None:
            sock.close()

    def close(self) -> None:
        for path in list(self.open):
            self.drop(path)

    def __enter__(self) -> "Connections":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ControlServer:
    """Non-blocking server side, driven by the agent's own event loop (no threads, so a
    request never races the data plane)."""

    def __init__(self, path: Path, handler: Handler):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        self.path = path
        self.handler = handler
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.clients: dict[socket.socket, bytes] = {}

    def accept(self) -> socket.socket | None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return None
        conn.setblocking(False)
        self.clients[conn] = b""
        return conn

    def serve(self, conn: socket.socket) -> bool:
        """Read what the client sent; answer complete lines. False when the client is gone."""
        try:
            chunk = conn.recv(1 << 16)
        except BlockingIOError:
            return True
        except OSError:
            chunk = b""
        if not chunk:
            self.drop(conn)
            return False
        buffered = self.clients[conn] + chunk
        *lines, rest = buffered.split(b"\n")
        self.clients[conn] = rest
        for line in lines:
            conn.setblocking(True)  # replies are small; write each whole
            try:
                conn.sendall(json.dumps(self._answer(line)).encode() + b"\n")
            except OSError:  # the client gave up waiting and left: its reply goes nowhere, the agent goes on
                self.drop(conn)
                return False
            conn.setblocking(False)
        return True

    def _answer(self, line: bytes) -> dict:
        try:
            req = json.loads(line)
            if not isinstance(req, dict) or "op" not in req:
                raise ValueError("a request is a JSON object with an 'op'")
            return {"ok": True, **self.handler(req)}
        except Exception as exc:  # a bad request must never stop the data plane
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    def drop(self, conn: socket.socket) -> None:
        self.clients.pop(conn, None)
        conn.close()

    def close(self) -> None:
        for conn in list(self.clients):
            self.drop(conn)
        self.listener.close()
        self.path.unlink(missing_ok=True)
