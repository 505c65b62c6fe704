"""DCQCN's two parameter sets on the pure NIC core, under the simulated clock: N flows into one port.

    python benchmarks/bench_dcqcn.py [--flows 2,4,8] [--warmup-ms 0.5] [--window-ms 2]
                                     [--marking enqueue,dequeue] [--kmin-kb 100 --kmax-kb 400]
                                     [--write-mb 64]

N senders (100G ports, 1 µs cables) each write 64 MB (`--write-mb`) to one receiver behind one
100G switch port that CE-marks between Kmin and Kmax (Pmax 20%). The default, Kmin 100 KB /
Kmax 400 KB, is the HPCC simulator's marking at 25G; its 100G figures are 400 KB / 1600 KB
(`--kmin-kb 400 --kmax-kb 1600`). The port reads its queue on enqueue (as switchd does), on
dequeue (as the HPCC simulator does), or each in turn. Measured from `--warmup-ms` for
`--window-ms`: the bottleneck's busy share, Jain's fairness index over the flows' goodput, the
port's queue (p10/p50/p90 of samples every 10 µs, against Kmin and Kmax), CNPs received, and
the flows' DCQCN rates over time (min/mean/max of each flow's time average). Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rocelab.roce.config import roce_config  # noqa: E402
from rocelab.roce.dcqcn import DCQCN_SETS  # noqa: E402
from rocelab.roce.sim import EcnMarking, incast_fairness  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", default="2,4,8")
    parser.add_argument("--warmup-ms", type=float, default=0.5, help="simulated time before measuring")
    parser.add_argument("--window-ms", type=float, default=2.0)
    parser.add_argument("--write-mb", type=int, default=64, help="each sender's write")
    parser.add_argument("--marking", default="enqueue,dequeue", help="when the port reads its queue")
    parser.add_argument("--kmin-kb", type=float, default=100)
    parser.add_argument("--kmax-kb", type=float, default=400)
    args = parser.parse_args()
    kmin, kmax = int(args.kmin_kb * 1e3), int(args.kmax_kb * 1e3)
    print(f"queue marks: Kmin {kmin / 1e3:.0f} KB, Kmax {kmax / 1e3:.0f} KB, Pmax 20%")
    print(f"{'set':9} {'marking':8} {'flows':>5} {'busy':>6} {'Jain':>6} {'goodput':>9} "
          f"{'queue p10/p50/p90 (KB)':>24} {'CNPs':>6} {'rate min/mean/max (Gb/s)':>25} {'sim s':>6}")
    for at in args.marking.split(","):
        ecn = EcnMarking(kmin, kmax, 0.2, at=at)
        for name in DCQCN_SETS:
            config = roce_config({"cc_algorithm": "dcqcn", "dcqcn": name})
            for n in map(int, args.flows.split(",")):
                started = time.process_time()
                r = incast_fairness(n, config, ecn=ecn, warmup_s=args.warmup_ms * 1e-3,
                                    window_s=args.window_ms * 1e-3, write_bytes=args.write_mb << 20)
                q = sorted(r.queue_bytes)
                depth = "/".join(f"{q[int(p * (len(q) - 1))] / 1e3:.0f}" for p in (0.1, 0.5, 0.9))
                means = [statistics.fmean(rates[i] for rates in r.rate_series_bps) / 1e9 for i in range(n)]
                print(f"{name:9} {at:8} {n:5} {r.utilisation:6.1%} {r.jain:6.3f} {sum(r.flow_bps) / 1e9:7.1f}G "
                      f"{depth:>24} {r.cnps:6} {min(means):8.1f}/{statistics.fmean(means):.1f}/{max(means):.1f}"
                      f"{'':>6} {time.process_time() - started:6.1f}", flush=True)


if __name__ == "__main__":
    main()
