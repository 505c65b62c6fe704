"""Ring AllReduce busbw against the line rate on leaf-spine-2x2, 4 hosts, live.

    python benchmarks/bench_allreduce.py [--sizes 4MB,16MB,64MB] [--iters 2] [--tdf auto|N]

100G links at the TDF `up` picks on this machine (or --tdf N), nicd on every host, for both
data planes: kernel forwarding (unshaped veths) and switchd (the emulated ASIC with the
roce-lossless profile). busbw = algbw × 2(N−1)/N, nccl-tests' definition. Prints figures,
asserts nothing. Also shown: the halving-doubling AllReduce at the
largest size. Needs root.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-bench-"))

from rocelab.runtime import calibration  # noqa: E402
from rocelab.engines import builtin_engines  # noqa: E402
from rocelab.model.lab import load_lab  # noqa: E402
from rocelab.traffic.job import run_job  # noqa: E402
from rocelab.traffic.spec import JobSpec  # noqa: E402
from rocelab.units import parse_bytes  # noqa: E402

TARGET = 0.95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4MB,16MB,64MB")
    parser.add_argument("--iters", type=int, default=2)
    parser.add_argument("--tdf", default="auto", help="auto (what `up` picks here) or a whole number")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_allreduce: needs root (it creates network namespaces)")
    sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    engine = builtin_engines().get("netns")
    print(f"{'data plane':10s} {'pattern':17s} {'size':>10s} {'time (prod.)':>13s} {'time (emul.)':>13s} "
          f"{'busbw (prod.)':>14s} {'busbw/line':>10s} {'retx B':>8s} {'CNPs':>5s} {'PFC paused':>11s}")
    for dataplane in ("kernel", "switchd"):
        spec = replace(load_lab("leaf-spine-2x2"), name=f"bar{os.getpid() % 10000}", nic="emulated",
                       dataplane=dataplane, tdf=None if args.tdf == "auto" else int(args.tdf), tdf_how="option",
                       **({"profile": None} if dataplane == "kernel" else {}))
        record = calibration.up(engine, spec)
        print(f"# {dataplane}: TDF {record.tdf} ({record.tdf_choice['how']}): {record.tdf_choice['why']}")
        try:
            runs = [("ring-allreduce", size) for size in sizes] + [("halving-doubling", sizes[-1])]
            for pattern, size in runs:
                report, _ = run_job(record, JobSpec(pattern, size_bytes=size, iterations=args.iters))
                total = report["total"]
                counters = total["counters"]
                share = total["busbw_vs_line_rate"]
                print(f"{dataplane:10s} {pattern:17s} {size:>10,} {total['time_s']['production'] * 1e3:>10.3f} ms "
                      f"{total['time_s']['emulated']:>11.3f} s {total['busbw_bps']['production'] / 1e9:>9.2f} Gb/s "
                      f"{share:>9.1%}{'' if share >= TARGET else '!'} {int(counters['retransmitted_bytes']):>8,} "
                      f"{int(counters['cnps_sent']):>5} {counters['pfc_paused_s']['production'] * 1e6:>8.1f} µs")
        finally:
            engine.down(record)
    print(f"(! below {TARGET:.0%} of line rate; times and busbw averaged over {args.iters} iterations)")


if __name__ == "__main__":
    main()
