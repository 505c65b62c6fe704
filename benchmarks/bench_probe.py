"""Measure a probe's capture ceiling: the highest rate at which it counts every frame.

    python benchmarks/bench_probe.py [--frame-bytes 1082] [--seconds 3] [--rates 10000,20000,...]
                                     [--pcap-dir DIR]

Two namespaces joined by a veth pair. A sender in one blasts RoCE WRITE frames (built once,
sent as preallocated bytes from a raw AF_PACKET socket, so the sender is not the limit) at
each rate for --seconds; a probe on the other end counts them, once without and once with a
pcap. Per rate: the rate the sender reached, frames sent, frames the probe counted, frames
the kernel dropped on the probe's socket (drops), frames lost anywhere else (lost: sent −
counted − drops, e.g. the veth's backlog), and the lag (frames not yet counted when the last
one was sent: a probe that keeps up lags by at most a read batch or two; one that does not
lags by the growing backlog in its socket buffer, which hides loss until it overflows).
Verdicts: "keeps up" (counted == sent, lag ≤ 1% of sent), "buffered" (counted == sent only
because the socket buffer held the backlog: a longer run would lose), "LOSS" (counted < sent).
The ceiling is the highest rate the probe kept up with. With a pcap, 1 KB frames at 100k
pps are 108 MB/s of file: on a disk the page cache's writeback, not the probe, may set the
limit (--pcap-dir /dev/shm takes the disk out). Needs root.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pyroute2 import IPRoute  # noqa: E402
from pyroute2 import netns as pyroute2_netns  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

from rocelab.engines.netns import COMMON_SYSCTLS, write_sysctls  # noqa: E402
from rocelab.kernel.netns import packet_socket  # noqa: E402
from rocelab.probes import Flow, Probe  # noqa: E402

SENDER_MAC, RECEIVER_MAC = "02:00:00:00:02:0a", "02:00:00:00:02:0b"
SRC, DST, SPORT = "198.18.0.1", "198.18.0.2", 49152
FLOW = Flow(SRC, DST, 17, SPORT, 4791)  # only the bench's frames are compared with what was sent
WRITE_MIDDLE = 0x07
DISTINCT_PSNS = 4096  # frames preallocated; the PSN wraps after these (the probe sees rewinds)
PSN_OFFSET = 14 + 20 + 8 + 9  # Ethernet, IPv4, UDP, then BTH byte 9: the 24-bit PSN
BURST_S = 0.0005  # the sender paces in bursts this long
DEFAULT_RATES = (10_000, 25_000, 50_000, 75_000, 100_000, 125_000, 150_000, 175_000, 200_000, 250_000, 300_000,
                 400_000, 0)
KEEPS_UP_LAG = 0.01  # of the frames sent: still unread when the last was sent


def frames_of(frame_bytes: int) -> list[bytes]:
    header = Ether(src=SENDER_MAC, dst=RECEIVER_MAC) / IP(src=SRC, dst=DST, tos=26 << 2 | 2) \
        / UDP(sport=SPORT, dport=4791) / BTH(opcode=WRITE_MIDDLE, dqpn=0x11, psn=0)
    payload_bytes = max(0, frame_bytes - len(header) - 4)  # 4: ICRC
    template = bytearray(bytes(header / Raw(bytes(payload_bytes))))
    frames = []
    for psn in range(DISTINCT_PSNS):
        template[PSN_OFFSET:PSN_OFFSET + 3] = psn.to_bytes(3, "big")  # ICRC left stale: nobody checks it here
        frames.append(bytes(template))
    return frames


def sender(ns: str, frame_bytes: int, jobs) -> None:
    """In `ns`: for each (rate_pps, count) received, send and answer (sent, elapsed_s). rate 0: flat out."""
    frames = frames_of(frame_bytes)
    sock = packet_socket("eth1", ns, protocol=0)
    send = sock.send
    while (job := jobs.recv()) is not None:
        rate_pps, count = job
        burst = max(1, int(rate_pps * BURST_S)) if rate_pps else count
        start = time.perf_counter()
        sent = 0
        while sent < count:
            if rate_pps:
                delay = start + sent / rate_pps - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            for i in range(sent, min(sent + burst, count)):
                send(frames[i % DISTINCT_PSNS])
            sent = min(sent + burst, count)
        jobs.send((sent, time.perf_counter() - start))


def make_pair(stem: str) -> tuple[str, str]:
    a, b = f"{stem}a", f"{stem}b"
    for ns in (a, b):
        pyroute2_netns.create(ns)
        write_sysctls(ns, COMMON_SYSCTLS)
    with IPRoute(netns=a) as ipr:
        ipr.link("add", ifname="eth1", kind="veth", address=SENDER_MAC,
                 peer={"ifname": "eth1", "net_ns_fd": b, "address": RECEIVER_MAC})
        ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="up")
    with IPRoute(netns=b) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="up")
    return a, b


def counted(report) -> int:
    return report.flows[FLOW].packets if FLOW in report.flows else 0


def run(receiver_ns: str, jobs, rate_pps: int, count: int, pcap: Path | None) -> dict:
    with Probe(receiver_ns, "eth1", pcap=pcap) as probe:
        jobs.send((rate_pps, count))
        sent, elapsed_s = jobs.recv()
        lag = sent - counted(probe.snapshot())
    frames, drops = counted(probe.report), probe.report.kernel_drops
    return {"target": rate_pps, "achieved": sent / elapsed_s, "sent": sent, "counted": frames, "drops": drops,
            "lag": lag, "lost": sent - frames - drops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frame-bytes", type=int, default=1082, help="frame size without FCS (1082: 1 KB payload)")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long each rate is sent")
    parser.add_argument("--rates", default=",".join(map(str, DEFAULT_RATES)),
                        help="packets/s, comma-separated; 0 = as fast as the sender can")
    parser.add_argument("--flat-out-frames", type=int, default=300_000, help="frames sent at rate 0")
    parser.add_argument("--pcap-dir", help="where the pcap runs write (default: the system's temporary folder)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_probe: needs root (it creates network namespaces)")
    rates = [int(r) for r in args.rates.split(",")]
    stem = f"bprobe{os.getpid()}"
    sender_ns, receiver_ns = make_pair(stem)
    jobs, child_end = multiprocessing.Pipe()
    child = multiprocessing.get_context("fork").Process(target=sender, args=(sender_ns, args.frame_bytes, child_end))
    child.start()
    try:
        with tempfile.TemporaryDirectory(dir=args.pcap_dir) as tmp:
            for label, pcap in (("count only", None), ("count + pcap", Path(tmp, "bench.pcap"))):
                where = f" in {tmp}" if pcap else ""
                print(f"\nprobe on {receiver_ns}:eth1, {args.frame_bytes}-byte frames, {label}{where}, "
                      f"{args.seconds:g} s per rate (CPUs: {os.cpu_count()})")
                print(f"{'target pps':>10} {'sent pps':>9} {'sent':>9} {'counted':>9} {'drops':>7} {'lost':>6} "
                      f"{'lag':>7}  verdict")
                best, first_loss = 0.0, None
                for rate in rates:
                    count = int(rate * args.seconds) if rate else args.flat_out_frames
                    r = run(receiver_ns, jobs, rate, count, pcap)
                    if r["counted"] < r["sent"]:
                        verdict = "LOSS"
                        first_loss = first_loss or r["achieved"]
                    elif r["lag"] > KEEPS_UP_LAG * r["sent"]:
                        verdict = "buffered"
                    else:
                        verdict = "keeps up"
                        best = max(best, r["achieved"])
                    target = f"{rate:,}" if rate else "flat out"
                    print(f"{target:>10} {r['achieved']:9,.0f} {r['sent']:9,} {r['counted']:9,} {r['drops']:7,} "
                          f"{r['lost']:6,} {r['lag']:7,}  {verdict}", flush=True)
                loss = f"{first_loss:,.0f} pps" if first_loss else "no loss up to the sender's limit"
                print(f"ceiling ({label}): keeps up with {best:,.0f} pps; starts losing at {loss}")
    finally:
        jobs.send(None)
        child.join(10)
        for ns in (sender_ns, receiver_ns):
            pyroute2_netns.remove(ns)


if __name__ == "__main__":
    main()
