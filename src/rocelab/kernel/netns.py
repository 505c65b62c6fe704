"""Network namespaces and packet sockets: the kernel layer every part of rocelab uses.

One room for entering a namespace (`in_netns`, `entering`, `call_in`), running a program
inside one (`run_in`, `popen_in`), opening an AF_PACKET socket on an interface inside one
(`packet_socket`), and finding and stopping the processes that live in a lab's namespaces
(`pids_in`, `stop`). setns(2) moves the calling thread only: `in_netns` returns it to its
own namespace afterwards, and a socket opened inside stays bound to the namespace it was
opened in, so the caller can use it from anywhere.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from pyroute2 import netns as pyroute2_netns

from rocelab.ethernet import ETH_P_ALL

NETNS_DIR = Path("/run/netns")  # where `ip netns` and pyroute2 keep named namespaces
# Packet-socket options (linux/if_packet.h, asm-generic/socket.h): Python names none of them.
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_AUXDATA = 8
PACKET_IGNORE_OUTGOING = 23  # Linux ≥ 4.20: do not hand the socket's own transmissions back to it
SO_RCVBUFFORCE = 33  # root may exceed net.core.rmem_max
SO_TIMESTAMPNS = 35  # also the cmsg type (SCM_TIMESTAMPNS)
_FORK = multiprocessing.get_context("fork")


@contextlib.contextmanager
def in_netns(ns: str) -> Iterator[None]:
    """The calling thread inside `ns` for the block, then back in its own namespace."""
    pyroute2_netns.pushns(ns)
    try:
        yield
    finally:
        pyroute2_netns.popns()


def enter(ns: str) -> None:
    """Move this process's thread into `ns` for good (a child that lives there: a probe, a sender)."""
    pyroute2_netns.setns(ns, flags=0)


def entering(ns: str) -> Callable[[], None]:
    """A preexec_fn that moves the child into a namespace (as `ip netns exec` would, through setns(2))."""
    return lambda: enter(ns)


def run_in(ns: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a program inside a namespace to its end."""
    return subprocess.run(argv, preexec_fn=entering(ns), check=False, **kwargs)


def popen_in(ns: str, argv: list[str], **kwargs) -> subprocess.Popen:
    """Start a program inside a namespace, in its own session: a Ctrl-C at the shell that
    started it does not reach it, and its process group can be stopped as one."""
    return subprocess.Popen(argv, preexec_fn=entering(ns), start_new_session=True, **kwargs)


def packet_socket(iface: str, ns: str | None = None, protocol: int = ETH_P_ALL) -> socket.socket:
    """A raw AF_PACKET socket bound to `iface` (inside `ns` when given), for every protocol by
    default (protocol 0: none yet, until the caller binds it again)."""
    with in_netns(ns) if ns else contextlib.nullcontext():
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(protocol))
        try:
            sock.bind((iface, protocol))
        except BaseException:
            sock.close()
            raise
    return sock


def _enter_and_call(ns: str, fn: Callable[..., Any], args: tuple, results) -> None:
    enter(ns)
    try:
        results.put(("ok", fn(*args)))
    except Exception as exc:  # handed to the caller, which raises it as its own
        results.put(("error", repr(exc)))


class CallIn:
    """fn(*args) in a forked child inside `ns`, for work that needs the whole process there
    (a sender that must not share the caller's GIL); .result() waits for its return value."""

    def __init__(self, ns: str, fn: Callable[..., Any], *args: Any):
        self._results = _FORK.Queue()
        self._proc = _FORK.Process(target=_enter_and_call, args=(ns, fn, args, self._results), daemon=True)
        self._proc.start()

    def result(self, timeout_s: float = 60.0) -> Any:
        status, value = self._results.get(timeout=timeout_s)
        self._proc.join(5)
        if status != "ok":
            raise RuntimeError(f"in namespace: {value}")
        return value


def call_in(ns: str, fn: Callable[..., Any], *args: Any, timeout_s: float = 60.0) -> Any:
    return CallIn(ns, fn, *args).result(timeout_s)


def _inode(ns: str) -> int | None:
    try:
        return (NETNS_DIR / ns).stat().st_ino
    except OSError:
        return None


def exists(ns: str) -> bool:
    return (NETNS_DIR / ns).exists()


def pids_in(namespaces: list[str]) -> list[int]:
    """Processes whose network namespace is one of these: they belong to the lab."""
    inodes = {i for i in (_inode(ns) for ns in namespaces) if i is not None}
    pids = []
    if not inodes:
        return pids
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.stat(f"/proc/{entry.name}/ns/net").st_ino in inodes:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def cmdline(pid: int) -> bytes:
    """A process's argv, NUL-separated (empty once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


def stop(pids: list[int], grace_s: float = 2.0) -> None:
    """SIGTERM, then SIGKILL what is still there after `grace_s`."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if Path(f"/proc/{p}").exists() and not zombie(p)]
        time.sleep(0.02)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
