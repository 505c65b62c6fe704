"""What the FRR-loss program (rocelab.kernel.frrloss) costs the frames it lets through: a port of a
BGP lab impaired with a partial loss runs it on every frame it sends, switchd's data frames too.

    python benchmarks/bench_frrloss.py [--frames 20000] [--rounds 3]

On a veth between two namespaces of its own, a packet socket sends 4 KB RoCEv2 frames (UDP
4791: the program reads their protocol and port, then passes them) as fast as it can, with the
program on the port at 50% and without it, alternating; printed, CPU µs per send() and the
ratio with to without (medians of the rounds). Needs root.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pyroute2 import IPRoute  # noqa: E402
from pyroute2 import netns as pyroute2_netns  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402

from rocelab.kernel import frrloss  # noqa: E402
from rocelab.kernel.netns import packet_socket  # noqa: E402

SENDER, RECEIVER = f"bfrr{os.getpid()}a", f"bfrr{os.getpid()}b"
FRAME = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="198.18.0.0", dst="198.18.0.1")
              / UDP(sport=50000, dport=4791) / bytes(4096))


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def send_us(sock, frames: int) -> float:
    start = cpu_s()
    for _ in range(frames):
        with contextlib.suppress(OSError):  # ENOBUFS: the far end's backlog is full; the same either way
            sock.send(FRAME)
    return (cpu_s() - start) / frames * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for ns in (SENDER, RECEIVER):
        pyroute2_netns.create(ns)
    try:
        with IPRoute(netns=SENDER) as ipr:
            ipr.link("add", ifname="eth1", kind="veth", mtu=9100, peer={"ifname": "eth1", "net_ns_fd": RECEIVER})
            ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="up")
        with IPRoute(netns=RECEIVER) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="up")
        sock = packet_socket("eth1", ns=SENDER)
        send_us(sock, args.frames)  # warm up
        without, with_program = [], []
        for _ in range(args.rounds):
            frrloss.set_loss(SENDER, "eth1", 0)
            without.append(send_us(sock, args.frames))
            frrloss.set_loss(SENDER, "eth1", 50)
            with_program.append(send_us(sock, args.frames))
        sock.close()
        assert frrloss.lost(SENDER) == {"eth1": 0}, "the program dropped a RoCEv2 frame"
    finally:
        for ns in (SENDER, RECEIVER):
            pyroute2_netns.remove(ns)
    a, b = statistics.median(without), statistics.median(with_program)
    print(f"bench_frrloss: {args.frames:,} frames of {len(FRAME):,} B per round, {args.rounds} rounds, alternating")
    print(f"  send() without the program {a:.2f} µs CPU  (rounds: {', '.join(f'{x:.2f}' for x in without)})")
    print(f"  send() with it at 50%      {b:.2f} µs CPU  (rounds: {', '.join(f'{x:.2f}' for x in with_program)})")
    print(f"  with / without: {b / a:.3f}×")


if __name__ == "__main__":
    main()
