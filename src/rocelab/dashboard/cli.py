"""`invoke dashboard`'s shell: check the input, bind, serve until Ctrl-C."""

from __future__ import annotations

import ipaddress
import signal
import sys

import uvicorn
from rich.console import Console

from rocelab.dashboard import serving
from rocelab.dashboard.sampler import DashboardSampler
from rocelab.dashboard.server import app, bind as bind_socket
from rocelab.errors import InputError, Problem

LOOPBACK = "127.0.0.1"


def _check(port: object, address: str) -> int:
    try:
        number = int(port)
        if not 0 <= number <= 65535:
            raise ValueError
    except (TypeError, ValueError):
        raise InputError([Problem("--port", "", f"{port!r} is not a TCP port", "0-65535, e.g. 8080")]) from None
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise InputError([Problem("--bind", "", f"{address!r} is not an IP address",
                                  "e.g. 127.0.0.1, or 0.0.0.0 for every address")]) from None
    return number


def page_url(address: str, port: int) -> str:
    host = LOOPBACK if address in ("0.0.0.0", "::") else address
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve(lab: str | None, port: object, address: str, console: Console, err_console: Console) -> None:
    number = _check(port, address)
    try:
        sock = bind_socket(address, number)
    except OSError as exc:
        raise InputError([Problem("--port", "", f"cannot listen on {address}:{number}: {exc.strerror}",
                                  "another program (or dashboard) uses it: pick another with --port")]) from None
    if not ipaddress.ip_address(address).is_loopback:
        err_console.print(f"[yellow]warning:[/yellow] listening on {address}: anyone who can reach this machine "
                          "sees the lab and can start probes on it (no authentication)", highlight=False)
    url = page_url(address, sock.getsockname()[1])
    sampler = DashboardSampler(lab).start()
    server = uvicorn.Server(uvicorn.Config(app(sampler), log_level="warning", access_log=False,
                                           timeout_graceful_shutdown=1))
    # uvicorn re-raises the SIGTERM it caught once it has shut down: exit through `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serving.announce(url)
    console.print(f"dashboard: {url} ({lab or 'the lab that is up'}); Ctrl-C stops", highlight=False)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        serving.withdraw()
        sampler.stop()
        sock.close()
    console.print("stopped")
