"""Helpers for live tests: run a function inside a lab namespace, send and count frames."""

from __future__ import annotations

import multiprocessing
import socket
import time

from pyroute2 import netns as pyroute2_netns

ETH_P_ALL = 0x0003
_FORK = multiprocessing.get_context("fork")


def _enter_and_call(ns, fn, args, results):
    pyroute2_netns.setns(ns, flags=0)
    try:
        results.put(("ok", fn(*args)))
    except Exception as exc:  # hand the failure to the test, which asserts on it
        results.put(("error", repr(exc)))


class InNetns:
    """fn(*args) in a forked child inside `ns`; .result() waits for its return value."""

    def __init__(self, ns: str, fn, *args):
        self._results = _FORK.Queue()
        self._proc = _FORK.Process(target=_enter_and_call, args=(ns, fn, args, self._results), daemon=True)
        self._proc.start()

    def result(self, timeout_s: float = 60.0):
        status, value = self._results.get(timeout=timeout_s)
        self._proc.join(5)
        if status != "ok":
            raise AssertionError(f"in-namespace helper failed: {value}")
        return value


def in_netns(ns: str, fn, *args, timeout_s: float = 60.0):
    return InNetns(ns, fn, *args).result(timeout_s)


def raw_socket(iface: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((iface, ETH_P_ALL))
    return sock


def blast(iface: str, frame: bytes, rate_bps: float, duration_s: float) -> int:
    """Send `frame` back to back at `rate_bps` for `duration_s`; the number sent."""
    sock = raw_socket(iface)
    gap_s = len(frame) * 8 / rate_bps
    start = time.monotonic()
    sent = 0
    while True:
        now = time.monotonic()
        if now - start >= duration_s:
            break
        due = start + sent * gap_s
        if now >= due:
            sock.send(frame)
            sent += 1
        else:
            time.sleep(min(due - now, 0.001))
    sock.close()
    return sent


def capture(iface: str, duration_s: float, ready=None) -> list[tuple[float, bytes]]:
    """Every frame received on `iface` for `duration_s`, with its arrival time."""
    sock = raw_socket(iface)
    sock.setsockopt(263, 23, 1)  # PACKET_IGNORE_OUTGOING: only what arrives
    sock.settimeout(0.05)
    frames = []
    if ready is not None:
        ready.set()
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        try:
            frame = sock.recv(65536)
        except socket.timeout:
            continue
        frames.append((time.monotonic(), frame))  # stamped on arrival, not when the wait began
    sock.close()
    return frames


def blast_together(sends: list[tuple[str, str, bytes]], rate_bps: float, duration_s: float) -> list[int]:
    """blast() from several (namespace, iface, frame) at once, as an incast's senders do;
    the number each sent."""
    running = [InNetns(ns, blast, iface, frame, rate_bps, duration_s) for ns, iface, frame in sends]
    return [r.result(duration_s + 60) for r in running]
