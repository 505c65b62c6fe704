"""DCQCN's two parameter sets on the pure NIC core, under the simulated clock: N flows into one port.

    python benchmarks/bench_dcqcn.py [--flows 2,4,8] [--warmup-ms 5] [--window-ms 5]
                                     [--marking enqueue,dequeue] [--kmin-kb 100 --kmax-kb 400 --pmax 0.2]
                                     [--write-mb 256]

N senders (100G ports, 1 µs cables) each write 256 MB (`--write-mb`) to one receiver behind one
100G switch port that CE-marks between Kmin and Kmax (Pmax 20%). The default, Kmin 100 KB /
Kmax 400 KB, is the HPCC simulator's marking at 25G; its 100G figures are 400 KB / 1600 KB
(`--kmin-kb 400 --kmax-kb 1600`), SONiC's default AZURE_LOSSLESS WRED profile 1 MiB / 2 MiB at
5% (`--kmin-kb 1048.576 --kmax-kb 2097.152 --pmax 0.05`). The port reads its queue on enqueue (as
switchd does), on dequeue (as the HPCC simulator does), or each in turn.

Measured from `--warmup-ms` (5 ms: ConnectX's flows are past the first burst's collapse; the
paper's need ~20 ms, `--warmup-ms 20 --write-mb 512`) for
`--window-ms`: the bottleneck's busy share, Jain's fairness index over the flows' goodput, the
port's queue (p10/p50/p90 and mean of samples every 10 µs, and the share of samples between Kmin
and Kmax), CNPs received, the flows' DCQCN rates (min/mean/max of each flow's time average) and
their sum's lowest and highest sample (how far the flows swing together around line rate).
Prints figures; asserts nothing.
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
    parser.add_argument("--warmup-ms", type=float, default=5.0, help="simulated time before measuring")
    parser.add_argument("--window-ms", type=float, default=5.0)
    parser.add_argument("--write-mb", type=int, default=256, help="each sender's write")
    parser.add_argument("--marking", default="enqueue,dequeue", help="when the port reads its queue")
    parser.add_argument("--kmin-kb", type=float, default=100)
    parser.add_argument("--kmax-kb", type=float, default=400)
    parser.add_argument("--pmax", type=float, default=0.2, help="marking probability at Kmax")
    args = parser.parse_args()
    kmin, kmax = int(args.kmin_kb * 1e3), int(args.kmax_kb * 1e3)
    print(f"queue marks: Kmin {kmin / 1e3:.0f} KB, Kmax {kmax / 1e3:.0f} KB, Pmax {args.pmax:.0%}; "
          f"measured {args.warmup_ms:g}-{args.warmup_ms + args.window_ms:g} ms")
    print(f"{'set':9} {'marking':8} {'flows':>5} {'busy':>6} {'Jain':>6} {'goodput':>8} "
          f"{'queue p10/p50/p90 (KB)':>22} {'mean':>5} {'in band':>7} {'CNPs':>6} "
          f"{'rate min/mean/max (Gb/s)':>25} {'sum low-high':>13} {'sim s':>6}")
    for at in args.marking.split(","):
        ecn = EcnMarking(kmin, kmax, args.pmax, at=at)
        for name in DCQCN_SETS:
            config = roce_config({"cc_algorithm": "dcqcn", "dcqcn": name})
            for n in map(int, args.flows.split(",")):
                started = time.process_time()
                r = incast_fairness(n, config, ecn=ecn, warmup_s=args.warmup_ms * 1e-3,
                                    window_s=args.window_ms * 1e-3, write_bytes=args.write_mb << 20)
                q = sorted(r.queue_bytes)
                depth = "/".join(f"{q[int(p * (len(q) - 1))] / 1e3:.0f}" for p in (0.1, 0.5, 0.9))
                in_band = sum(kmin <= x <= kmax for x in q) / len(q)
                means = [statistics.fmean(rates[i] for rates in r.rate_series_bps) / 1e9 for i in range(n)]
                total = [sum(rates) / 1e9 for rates in r.rate_series_bps]
                print(f"{name:9} {at:8} {n:5} {r.utilisation:6.1%} {r.jain:6.3f} {sum(r.flow_bps) / 1e9:7.1f}G "
                      f"{depth:>22} {statistics.fmean(q) / 1e3:5.0f} {in_band:7.0%} {r.cnps:6} "
                      f"{min(means):8.1f}/{statistics.fmean(means):.1f}/{max(means):.1f}{'':>6} "
                      f"{min(total):6.1f}-{max(total):<6.1f} {time.process_time() - started:6.1f}", flush=True)


if __name__ == "__main__":
    main()
