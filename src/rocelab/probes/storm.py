"""PFC frames sent from a host's port: the stuck NIC of a PFC storm, or a receiver that
holds its queue for a threshold probe."""

from __future__ import annotations

from rocelab.ethernet import mac_bytes
from rocelab.kernel.netns import packet_socket
from rocelab.switch.frames import build_pfc

XOFF_REFRESH_S = 0.05  # well inside the 65,535 quanta one XOFF pauses for, at any emulated rate


def hold_pfc_pause(ns: str, iface: str, mac: str, priority: int, stop) -> None:
    """XOFF on one priority, refreshed faster than it can expire, until `stop`, then XON, as
    a NIC that recovers sends. `stop` is a threading or multiprocessing Event."""
    sock = packet_socket(iface, ns, protocol=0)  # protocol 0: it sends, it receives nothing
    with sock:
        frame = build_pfc(mac_bytes(mac), {priority: 0xFFFF})
        while not stop.is_set():
            sock.send(frame)
            stop.wait(XOFF_REFRESH_S)
        sock.send(build_pfc(mac_bytes(mac), {priority: 0}))
