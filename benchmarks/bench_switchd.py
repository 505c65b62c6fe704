"""switchd on the wire: shaping accuracy on 4 ports at once, forwarding ceiling, CPU, RSS.

    python benchmarks/bench_switchd.py [--seconds S]

1. incast-1x5 at TDF 1000 (100G ports → 100 Mb/s): four flows at 1.2× line rate, each to
   a different egress port (h1→h2, h2→h3, h3→h4, h4→h5), so four ports are shaped at once;
   each receiver's rate must be within ±3% of 100 Mb/s.
2. The same leaf at TDF 1 (ports at 100 Gb/s: the shaper never limits): two senders offer
   4 KB frames at rising rates. Per step: what switchd forwards, its CPU time per packet
   (utime + stime from /proc, kernel work of its sends included) and share of a core, and
   RSS. On this 2-core machine the senders take CPU too, so the ceiling is reported both
   as measured and as 1 / (CPU per packet): what one whole core would forward.
3. The ratio to a bare Python forwarder, measured in the same run the same way: the same
   leaf, the same two raw senders flooding, frames counted by the kernel (tx_packets of the
   two egress veths), first through switchd, then through a loop that only reads each frame
   and writes it out of the paired port (SCHED_RR, as switchd runs), with switchd stopped.
Needs root.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "live")]
os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-bench-"))

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

from rocelab.runtime import calibration  # noqa: E402
from pyroute2 import IPRoute  # noqa: E402

from rocelab.kernel.netns import CallIn, popen_in, stop  # noqa: E402
from nsutil import blast, capture  # noqa: E402
from rocelab.kernel import control  # noqa: E402
from rocelab.engines import builtin_engines  # noqa: E402
from rocelab.model.lab import load_lab  # noqa: E402

FRAME_BYTES = 4096
CLK_TCK = os.sysconf("SC_CLK_TCK")


def frame(fabric, src: str, dst: str, sport: int) -> bytes:
    port = fabric.node(src).ports[0]
    head = (Ether(src=port.mac, dst=fabric.peer(port).mac)
            / IP(src=str(fabric.host_address(src)), dst=str(fabric.host_address(dst)), tos=0)
            / UDP(sport=sport, dport=4791))
    return bytes(head / Raw(b"\x00" * (FRAME_BYTES - len(head))))


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def shaping(seconds: float) -> None:
    engine = builtin_engines().get("netns")
    spec = replace(load_lab("incast-1x5"), name=f"bsw{os.getpid()}", tdf=1000)
    record = calibration.up(engine, spec)
    try:
        rate_bps = 100e9 / spec.tdf
        pairs = [("h1", "h2"), ("h2", "h3"), ("h3", "h4"), ("h4", "h5")]
        rx = {dst: CallIn(record.node(dst).netns, capture, "eth1", seconds + 1.0) for _, dst in pairs}
        time.sleep(0.3)
        tx = [CallIn(record.node(src).netns, blast, "eth1", frame(spec.fabric, src, dst, 7000 + i), 1.2 * rate_bps,
                      seconds) for i, (src, dst) in enumerate(pairs)]
        for t in tx:
            t.result()
        print(f"shaping, TDF {spec.tdf}: 4 egress ports at once, offered 1.2 × {rate_bps / 1e6:g} Mb/s each")
        for src, dst in pairs:
            frames = [(t, f) for t, f in rx[dst].result() if len(f) == FRAME_BYTES]
            start = frames[0][0] + 0.5  # the queue fills and the shaper settles first
            window = [(t, f) for t, f in frames if t >= start]
            got = sum(len(f) for _, f in window[1:]) * 8 / (window[-1][0] - window[0][0])
            print(f"  {src}→{dst}: {got / 1e6:7.2f} Mb/s = {100 * got / rate_bps:6.2f}% of line rate "
                  f"({'within' if abs(got / rate_bps - 1) <= 0.03 else 'OUTSIDE'} ±3%)")
    finally:
        engine.down(record)


def ceiling(seconds: float, with_probe: bool = False) -> None:
    engine = builtin_engines().get("netns")
    spec = replace(load_lab("incast-1x5"), name=f"bsc{os.getpid()}", tdf=1)
    record = calibration.up(engine, spec)
    probes = []
    try:
        pid = next(p["pid"] for p in record.processes if p["what"] == "switchd")
        sock = control.socket_path(spec.name, "leaf1")
        if with_probe:  # scapy-side observers on both egress ports, as a learner would attach them
            from rocelab.probes import Probe

            probes = [Probe(record.node("leaf1").netns, port).start() for port in ("eth2", "eth4")]
        print(f"ceiling, TDF 1 (no shaping), {FRAME_BYTES} B frames, 2 senders, {seconds:g} s per step"
              f"{', probes attached on leaf1:eth2 and leaf1:eth4' if with_probe else ''}:")
        best, best_us = 0.0, float("inf")
        for offered_pps in (10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 640_000):
            before = control.request(sock, "counters")["counters"]
            cpu0, t0 = cpu_s(pid), time.monotonic()
            per_sender_bps = offered_pps / 2 * FRAME_BYTES * 8
            senders = [CallIn(record.node(src).netns, blast, "eth1", frame(spec.fabric, src, dst, 8000 + i),
                               per_sender_bps, seconds) for i, (src, dst) in enumerate([("h1", "h2"), ("h3", "h4")])]
            sent = sum(s.result() for s in senders)
            time.sleep(0.2)
            after = control.request(sock, "counters")["counters"]
            elapsed, cpu = time.monotonic() - t0, cpu_s(pid) - cpu0
            forwarded = sum(after["ports"][p]["tx_packets"] - before["ports"][p]["tx_packets"] for p in ("eth2", "eth4"))
            pps = forwarded / seconds
            best = max(best, pps)
            us = 1e6 * cpu / max(forwarded, 1)
            best_us = min(best_us, us)
            print(f"  offered {sent / seconds:9,.0f} pkt/s  forwarded {pps:9,.0f} pkt/s "
                  f"({pps * FRAME_BYTES * 8 / 1e9:5.2f} Gb/s, {100 * forwarded / max(sent, 1):5.1f}%)  "
                  f"switchd {us:5.1f} µs/pkt, {100 * cpu / elapsed:4.0f}% of a core")
        print(f"  measured ceiling {best:,.0f} pkt/s; at its cheapest ({best_us:.1f} µs/pkt) one whole core "
              f"would forward {1e6 / best_us:,.0f} pkt/s; switchd RSS {rss_mb(pid):.1f} MB")
        for probe in probes:
            report = probe.stop()
            print(f"  probe {report.source}: {report.totals.get('frames', 0):,} frames counted, "
                  f"{report.kernel_drops or 0:,} lost by the probe's socket")
        probes = []
    finally:
        for probe in probes:
            probe.stop()
        engine.down(record)


BARE_FORWARDER = """
import os, select, socket
os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
pairs = {"eth1": "eth2", "eth3": "eth4"}
socks = {}
for name in ("eth1", "eth2", "eth3", "eth4"):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.setsockopt(263, 23, 1)  # PACKET_IGNORE_OUTGOING, as switchd's ports
    s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)
    s.bind((name, 3))
    s.setblocking(False)
    socks[name] = s
out = {socks[a].fileno(): socks[b] for a, b in pairs.items()}
ins = [socks[a] for a in pairs]
buf = bytearray(65536)
while True:
    for s in select.select(ins, [], [])[0]:
        send = out[s.fileno()].send
        for _ in range(64):
            try:
                n = s.recv_into(buf)
            except BlockingIOError:
                break
            send(memoryview(buf)[:n])
"""


def egress_tx_packets(ns: str) -> int:
    with IPRoute(netns=ns) as ipr:
        return sum(link.get_attr("IFLA_STATS64")["tx_packets"] for link in ipr.get_links()
                   if link.get_attr("IFLA_IFNAME") in ("eth2", "eth4"))


def flood(record, fabric, seconds: float, offered_pps: int) -> float:
    """Packets per second the two egress veths sent while h1 and h3 flooded (kernel counters)."""
    leaf = record.node("leaf1").netns
    before = egress_tx_packets(leaf)
    pairs = [("h1", "h2"), ("h3", "h4")]
    senders = [CallIn(record.node(src).netns, blast, "eth1", frame(fabric, src, dst, 9000 + i),
                      offered_pps / 2 * FRAME_BYTES * 8, seconds) for i, (src, dst) in enumerate(pairs)]
    for sender in senders:
        sender.result()
    time.sleep(0.2)
    return (egress_tx_packets(leaf) - before) / seconds


def ratio(seconds: float, offered_pps: int = 400_000) -> None:
    engine = builtin_engines().get("netns")
    spec = replace(load_lab("incast-1x5"), name=f"bsr{os.getpid()}", tdf=1)
    record = calibration.up(engine, spec)
    try:
        pid = next(p["pid"] for p in record.processes if p["what"] == "switchd")
        switchd_pps = flood(record, spec.fabric, seconds, offered_pps)
        stop([pid])
        bare = popen_in(record.node("leaf1").netns, [sys.executable, "-c", BARE_FORWARDER])
        try:
            time.sleep(0.5)
            bare_pps = flood(record, spec.fabric, seconds, offered_pps)
        finally:
            stop([bare.pid])
        print(f"ratio, TDF 1, {FRAME_BYTES} B frames, 2 senders offering {offered_pps:,} pkt/s in all, counted by "
              f"the kernel on the egress veths:\n  switchd {switchd_pps:9,.0f} pkt/s, bare Python forwarder "
              f"{bare_pps:9,.0f} pkt/s: ratio {switchd_pps / bare_pps:.2f}x")
    finally:
        engine.down(record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--ceiling-only", action="store_true")
    parser.add_argument("--probe", action="store_true", help="measure the ceiling again with probes attached")
    parser.add_argument("--ratio-only", action="store_true", help="only the ratio to a bare Python forwarder")
    parser.add_argument("--offer", default="400000,1000000",
                        help="pkt/s the two senders offer for the ratio, comma-separated (default 400,000, which "
                             "the bare forwarder carries nearly all of, so the ratio tops out near 1x; and "
                             "1,000,000, more than either carries: their ceilings compared)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_switchd: needs root (it creates network namespaces)")
    offers = [int(o) for o in args.offer.split(",")]
    if args.ratio_only:
        for offer in offers:
            ratio(args.seconds, offer)
        return
    if not args.ceiling_only:
        shaping(args.seconds)
    ceiling(args.seconds)
    for offer in offers:
        ratio(args.seconds, offer)
    if args.probe:
        ceiling(args.seconds, with_probe=True)


if __name__ == "__main__":
    main()
