"""Helpers for live tests and benchmarks: send and count frames inside a lab namespace
(rocelab.kernel.netns enters it)."""

from __future__ import annotations

import socket
import time

from rocelab.kernel.netns import CallIn, packet_socket


def blast(iface: str, frame: bytes, rate_bps: float, duration_s: float) -> int:
    """Send `frame` back to back at `rate_bps` for `duration_s`; the number sent."""
    sock = packet_socket(iface)
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
    sock = packet_socket(iface)
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
    running = [CallIn(ns, blast, iface, frame, rate_bps, duration_s) for ns, iface, frame in sends]
    return [r.result(duration_s + 60) for r in running]
