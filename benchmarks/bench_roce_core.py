"""How many packets per second the pure RoCE NIC core can process.

Two Nic cores exchange one large RDMA WRITE over an ideal in-memory wire (no delay, no
loss) under a simulated clock; the CPU time spent inside each NIC's calls is measured
separately, since in a lab each NIC runs in its own nicd process. The live target is one
QP at ≥ 95% of a 100 Mb/s (dilated 100G) link: about 3,000 packets/s at 4 KB. Then the same
bytes as one RDMA READ (the responder builds the data packets, the requester places them),
with its cost per data packet as a ratio of the WRITE's, same run.

    /opt/rocelab-venv/bin/python benchmarks/bench_roce_core.py [--size-mib 64] [--pmtu 4096] [--rounds 1]

With --rounds N the two run N times interleaved; the ratios are of the medians.
"""

from __future__ import annotations

import argparse
import random
import statistics
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


def run(size_bytes: int, pmtu_bytes: int, rate_bps: float, verb: str) -> tuple[float, float]:
    """One transfer; the data sender's and receiver's CPU per data packet (s)."""
    rng = random.Random(1)
    config = NicConfig(pmtu_bytes=pmtu_bytes)
    a = Nic("02:00:00:00:00:01", "198.18.0.1", rate_bps, config, rng=rng)
    b = Nic("02:00:00:00:00:02", "198.18.0.2", rate_bps, config, rng=rng)
    qa, _ = connect_qps(a, b)
    data = rng.randbytes(size_bytes)
    target = bytearray(size_bytes)
    if verb == "write":  # a sends the data to b
        mr = b.register_mr(target)
        a.post_write(qa, 1, data, remote_va=mr.va, r_key=mr.r_key)
        sender, receiver = Timed(a), Timed(b)
    else:  # a reads b's data: b's responses are the data packets
        mr = b.register_mr(bytearray(data))
        a.post_read(qa, 1, target, remote_va=mr.va, r_key=mr.r_key)
        sender, receiver = Timed(b), Timed(a)
    requester, responder = (sender, receiver) if verb == "write" else (receiver, sender)

    wall_start = time.perf_counter()
    now = 0.0
    completions = []
    while not completions:
        dues = [due for due in (requester.call(a.next_event, now), responder.call(b.next_event, now))
                if due is not None]
        now = max(now, min(dues))
        for frame in requester.call(a.poll, now):  # ideal wire: arrives as it leaves
            responder.call(b.receive, frame, now)
        for frame in responder.call(b.poll, now):
            requester.call(a.receive, frame, now)
        completions = a.poll_completions()
    wall_s = time.perf_counter() - wall_start

    assert [wc.status for wc in completions] == [WcStatus.SUCCESS] and target == data
    tx, rx = sender.nic.counters(), receiver.nic.counters()
    data_packets = tx["tx_packets"]
    acks = rx["tx_packets"]
    frames = data_packets + acks
    print(f"bench_roce_core: {size_bytes / 2**20:g} MiB RDMA {verb.upper()}, PMTU {pmtu_bytes}, "
          f"{rate_bps / 1e9:g} Gb/s simulated port, ideal wire")
    answers = "ACKs" if verb == "write" else "READ requests"
    print(f"  data packets {data_packets:,}  {answers} {acks:,}  "
          f"retransmitted {a.counters()['retransmitted_packets']:,}  payload intact")
    print(f"  simulated time {now * 1e3:.3f} ms: goodput {size_bytes * 8 / now / rate_bps:.1%} "
          f"of line rate")
    work = (("build + ACK parse", "parse + place + ACK build") if verb == "write"
            else ("read + build responses", "parse + place"))
    for name, timed, work in (("sender  ", sender, work[0]), ("receiver", receiver, work[1])):
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
    return sender.cpu_s / data_packets, receiver.cpu_s / data_packets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=float, default=64)
    parser.add_argument("--pmtu", type=int, default=4096, choices=(1024, 2048, 4096))
    parser.add_argument("--rate-gbps", type=float, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    size = int(args.size_mib * 2**20)
    rounds = [(run(size, args.pmtu, args.rate_gbps * 1e9, "write"), run(size, args.pmtu, args.rate_gbps * 1e9, "read"))
              for _ in range(args.rounds)]
    (write_tx, write_rx), (read_tx, read_rx) = (
        [statistics.median(r[verb][side] for r in rounds) for side in (0, 1)] for verb in (0, 1))
    print(f"READ against WRITE, same run ({args.rounds} round{'s' if args.rounds > 1 else ''}, medians): data sender "
          f"{read_tx * 1e6:.2f} against {write_tx * 1e6:.2f} us ({read_tx / write_tx:.2f}×), data receiver "
          f"{read_rx * 1e6:.2f} against {write_rx * 1e6:.2f} us ({read_rx / write_rx:.2f}×) a data packet")


if __name__ == "__main__":
    main()
