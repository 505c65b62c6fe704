"""How many packets per second the pure RoCE NIC core can process.

Two Nic cores exchange one large RDMA WRITE over an ideal in-memory wire (no delay, no
loss) under a simulated clock; the CPU time spent inside each NIC's calls is measured
separately, since in a lab each NIC runs in its own nicd process. The live target is one
QP at ≥ 95% of a 100 Mb/s (dilated 100G) link: about 3,000 packets/s at 4 KB.

    /opt/rocelab-venv/bin/python benchmarks/bench_roce_core.py [--size-mib 64] [--pmtu 4096]
"""

from __future__ import annotations

import argparse
import random
import time

from rocelab.roce import Nic, NicConfig, WcStatus
from rocelab.roce.sim import connect_qps

LIVE_TARGET_PPS = 3_000


class Timed:
    """Accumulates the CPU time of calls into one NIC."""

    def __init__(self, nic: Nic):
        self.nic = nic
        self.cpu_s = 0.0

    def call(self, method, *args):
        start = time.perf_counter()
        result = method(*args)
        self.cpu_s += time.perf_counter() - start
        return result


def run(size_bytes: int, pmtu_bytes: int, rate_bps: float) -> None:
    rng = random.Random(1)
    config = NicConfig(pmtu_bytes=pmtu_bytes)
    a = Nic("02:00:00:00:00:01", "198.18.0.1", rate_bps, config, rng=rng)
    b = Nic("02:00:00:00:00:02", "198.18.0.2", rate_bps, config, rng=rng)
    qa, _ = connect_qps(a, b)
    data = rng.randbytes(size_bytes)
    target = bytearray(size_bytes)
    mr = b.register_mr(target)
    a.post_write(qa, 1, data, remote_va=mr.va, r_key=mr.r_key)
    sender, receiver = Timed(a), Timed(b)

    wall_start = time.perf_counter()
    now = 0.0
    completions = []
    while not completions:
        dues = [due for due in (sender.call(a.next_event, now), receiver.call(b.next_event, now))
                if due is not None]
        now = max(now, min(dues))
        for frame in sender.call(a.poll, now):  # ideal wire: arrives as it leaves
            receiver.call(b.receive, frame, now)
        for frame in receiver.call(b.poll, now):
            sender.call(a.receive, frame, now)
        completions = a.poll_completions()
    wall_s = time.perf_counter() - wall_start

    assert [wc.status for wc in completions] == [WcStatus.SUCCESS] and target == data
    tx, rx = a.counters(), b.counters()
    data_packets = tx["tx_packets"]
    acks = rx["tx_packets"]
    frames = data_packets + acks
    print(f"bench_roce_core: {size_bytes / 2**20:g} MiB RDMA WRITE, PMTU {pmtu_bytes}, "
          f"{rate_bps / 1e9:g} Gb/s simulated port, ideal wire")
    print(f"  data packets {data_packets:,}  ACKs {acks:,}  "
          f"retransmitted {tx['retransmitted_packets']:,}  payload intact")
    print(f"  simulated time {now * 1e3:.3f} ms: goodput {size_bytes * 8 / now / rate_bps:.1%} "
          f"of line rate")
    for name, timed, work in (("sender  ", sender, "build + ACK parse"),
                              ("receiver", receiver, "parse + place + ACK build")):
        print(f"  {name} CPU {timed.cpu_s:6.3f} s  {data_packets / timed.cpu_s:9,.0f} data pkt/s"
              f"  {timed.cpu_s / data_packets * 1e6:6.2f} us/pkt ({work})")
    both_s = sender.cpu_s + receiver.cpu_s
    print(f"  sender+receiver {frames / both_s:,.0f} frames/s processed, "
          f"{both_s / data_packets * 1e6:.2f} us per data packet end to end "
          f"(wall {wall_s:.3f} s incl. harness)")
    slowest = max(sender.cpu_s, receiver.cpu_s)
    print(f"  ceiling per NIC process ≈ {data_packets / slowest:,.0f} pkt/s = "
          f"{data_packets / slowest / LIVE_TARGET_PPS:.0f}× the live target of "
          f"{LIVE_TARGET_PPS:,} pkt/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=float, default=64)
    parser.add_argument("--pmtu", type=int, default=4096, choices=(1024, 2048, 4096))
    parser.add_argument("--rate-gbps", type=float, default=100)
    args = parser.parse_args()
    run(int(args.size_mib * 2**20), args.pmtu, args.rate_gbps * 1e9)


if __name__ == "__main__":
    main()
