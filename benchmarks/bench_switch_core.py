"""Throughput of the switch core alone: 4 KB RoCEv2 frames through a 4-port switch with the
full pipeline (parse, classify, route, admit, WRED/ECN, DWRR + strict, token bucket, PFC)
under a simulated clock, driven as switchd drives it: receive, poll, next_event per frame.

    python benchmarks/bench_switch_core.py [--frames N]

Each run on the Python pipeline and on its C fast path (rocelab.switch.fastpath), with the
ratio. Runs: `forward` (each port sends to the next at 90% of line rate: no congestion),
`incast` (two ports into one at 60% each: queues build, ECN marks, PFC pauses the senders,
who honour it), and one per load-balancing mode beyond hash (`flowlet`, `packet`, `spray`: eth1
at 90% of its rate to a prefix behind an ECMP group of the other three ports, sixteen flows).
The live target for switchd is ≥ 50,000 frames/s; the core must leave room.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rocelab.qos.model import (
    BufferPool, BufferProfile, PortQos, QosProfile, QueueQos, Scheduler, WredProfile,
)
from rocelab.switch import Fib, NextHop, PortSpec, Switch
from rocelab.switch.balance import Balance
from rocelab.switch.fastpath import FastSwitch
from rocelab.ethernet import ETH_P_MAC_CONTROL, pause_duration_s
from rocelab.switch.frames import parse_pfc


FRAME_BYTES = 4096
RATE_BPS = 100e6  # 100G at time dilation 1000
PORTS = ["eth1", "eth2", "eth3", "eth4"]
FLOWS_PER_PAIR = 16
FRAME_TIME_S = FRAME_BYTES * 8 / RATE_BPS
GROUP = "eth9"  # a destination "port" whose prefix, 198.18.9.0/24, is behind an ECMP group of eth2-eth4


def _profile() -> QosProfile:
    pool = BufferPool("ingress_lossless_pool", "ingress", "dynamic", 12_000_000)
    pg = BufferProfile("pg_lossless_100000_5m_profile", "ingress_lossless_pool", 1518,
                       dynamic_th=-3, xon_bytes=18_432, xoff_bytes=165_000,
                       xon_offset_bytes=2_496)
    wred = WredProfile("AZURE_LOSSLESS", False, "ecn_all", 100_000, 400_000, 20)
    queues = {3: QueueQos(scheduler=Scheduler("scheduler.1", "DWRR", 50), wred=wred),
              0: QueueQos(scheduler=Scheduler("scheduler.0", "DWRR", 50)),
              6: QueueQos(scheduler=Scheduler("scheduler.cnp", "STRICT"))}
    dscp_to_tc = tuple({3: 3, 48: 6}.get(d, 0) for d in range(64))
    ports = {}
    for i, _ in enumerate(PORTS):
        name = f"Ethernet{4 * i}"
        ports[name] = PortQos(port=name, dscp_to_tc=dscp_to_tc, tc_to_pg=(0, 0, 0, 3, 4, 0, 0, 0),
                              pfc_enable=frozenset({3}), pgs={3: pg}, queues=queues)
    return QosProfile("bench", {pool.name: pool}, ports)


def _mac(kind: int, port: str) -> str:
    return f"02:00:00:00:0{kind}:0{port[-1]}"


def _frames(src: str, dst: str) -> list[bytes]:
    frames = []
    for flow in range(FLOWS_PER_PAIR):
        head = (Ether(src=_mac(1, src), dst=_mac(0, src))
                / IP(src=f"198.18.{src[-1]}.2", dst=f"198.18.{dst[-1]}.2", tos=3 << 2 | 2)
                / UDP(sport=49152 + flow, dport=4791))
        frames.append(bytes(head / bytes(FRAME_BYTES - len(head))))
    return frames


def run(label: str, implementation, pairs: list[tuple[str, str]], load: float, n_frames: int,
        balance: Balance | None = None) -> float:
    """Seconds per frame; prints the run."""
    routes = {f"198.18.{p[-1]}.0/24": [NextHop(p, _mac(1, p))] for p in PORTS}
    routes[f"198.18.{GROUP[-1]}.0/24"] = [NextHop(p, _mac(1, p)) for p in PORTS[1:]]
    switch = implementation("bench", [PortSpec(p, _mac(0, p), RATE_BPS) for p in PORTS], _profile(),
                            Fib(routes), random.Random(1), balance=balance)
    # Each sender offers `load` of line rate, round robin over its flows.
    traffic = [(src, _frames(src, dst)) for src, dst in pairs]
    gap_s = FRAME_TIME_S / load / len(pairs)
    paused_until = {src: 0.0 for src, _ in pairs}
    sent = pfc_frames = 0
    now = 0.0
    received = 0
    started = time.perf_counter()
    i = 0
    while received < n_frames:
        src, frames = traffic[i % len(traffic)]
        i += 1
        if paused_until[src] <= now:  # the sender honours PFC, as a NIC does
            switch.receive(src, frames[i // len(traffic) % FLOWS_PER_PAIR], now)
            received += 1
        for port, frame in switch.poll(now):
            if frame[12] << 8 | frame[13] == ETH_P_MAC_CONTROL:
                pfc_frames += 1
                quanta = parse_pfc(frame).get(3, 0)
                paused_until[port] = now + pause_duration_s(quanta, RATE_BPS)
            else:
                sent += 1
        switch.next_event(now)
        now += gap_s
    elapsed = time.perf_counter() - started
    counters = switch.counters(now)
    marked = sum(q["ecn_marked_packets"] for p in counters["ports"].values() for q in p["queues"])
    drops = sum(d["packets"] for d in counters["drops"].values())
    print(f"{label:8} {switch.implementation:6} {n_frames} frames of {FRAME_BYTES} B in {elapsed:.2f} s: "
          f"{n_frames / elapsed:,.0f} frames/s, {elapsed / n_frames * 1e6:.2f} us/frame "
          f"(forwarded {sent}, ECN-marked {marked}, PFC frames {pfc_frames}, dropped {drops})")
    return elapsed / n_frames


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200_000)
    args = parser.parse_args(argv)
    implementations = [Switch] if FastSwitch is None else [Switch, FastSwitch]
    if FastSwitch is None:
        print("the C fast path is not built here: the Python pipeline alone")
    for label, pairs, load, balance in (
            ("forward", [(PORTS[i], PORTS[(i + 1) % 4]) for i in range(4)], 0.9, None),
            ("incast", [("eth1", "eth3"), ("eth2", "eth3")], 0.6, None),
            *((mode, [("eth1", GROUP)], 0.9, Balance(mode)) for mode in ("flowlet", "packet", "spray"))):
        per_frame = [run(label, implementation, pairs, load, args.frames, balance) for implementation in implementations]
        if len(per_frame) == 2:
            print(f"{label:8} C fast path: {per_frame[0] / per_frame[1]:.1f}x the Python pipeline's speed "
                  f"(the harness's own per-frame cost included in both)")


if __name__ == "__main__":
    main(sys.argv[1:])
