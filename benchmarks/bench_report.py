"""What writing a run's report costs `invoke run` after its last case: per case, the plots, the
topology picture and report.html.

    python benchmarks/bench_report.py [--cases 4] [--samples 400] [--rounds 3]

Builds the time series a case of lab-link-failure samples (every series kind the sampler
records, labelled for leaf-spine-2x2's ports, queues and 8 QPs per ring hop; `--samples` points
of made-up values), then writes the same run's reports two ways, alternating, `--rounds` times:
case by case, each drawing its own topology picture (rocelab.reporting.run.write_report, as
`invoke run` did before), and as `invoke run` does now (write_reports: the topology drawn once
for the run, the cases' reports spread over worker processes, one per core). Prints the wall
seconds of each, per round, and the ratio. No lab, no root.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rocelab.engines.state import LabState  # noqa: E402
from rocelab.reporting import run as runreport  # noqa: E402
from rocelab.runtime.timeseries import KINDS, Series, TimeSeries  # noqa: E402

TDF = 8000
INTERVAL_S = 0.05


def series_of(samples: int) -> TimeSeries:
    rng = random.Random(1)
    switch_ports = {"leaf1": ["eth1", "eth2", "eth3", "eth4"], "leaf2": ["eth1", "eth2", "eth3", "eth4"],
                    "spine1": ["eth1", "eth2"], "spine2": ["eth1", "eth2"]}
    labels = {"queue": [{"node": n, "port": p, "queue": "3"} for n, ps in switch_ports.items() for p in ps],
              "port": [{"node": n, "port": p} for n, ps in switch_ports.items() for p in ps],
              "qp": [{"node": h, "qp": str(q)} for h in ("h1", "h2", "h3", "h4") for q in range(8)]}
    out = []
    for kind in KINDS:
        family = "qp" if kind.startswith("qp_") or kind in ("ooo_received", "reorder_distance_max") else \
            "queue" if kind in ("queue_depth_bytes", "paused_fraction", "pg_xoff") else "port"
        for lab in labels[family]:
            out.append(Series(kind, dict(lab), [rng.random() * 1e6 for _ in range(samples)]))
    return TimeSeries("lab-link-failure", TDF, INTERVAL_S, [i * INTERVAL_S for i in range(samples)], out)


def record() -> LabState:
    return LabState(name="lab-link-failure", engine="netns", source=str(ROOT / "labs/lab-link-failure/lab.yml"),
                    dataplane="switchd", tdf=TDF, status="up")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=4)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    ts, lab = series_of(args.samples), record()
    cases = [(f"case{i}", ts, "passed", f"case {i}") for i in range(args.cases)]
    tables = [("Observations", ["observation", "case0"], [["busbw_gbps", 93.9]])]
    before, after = [], []
    with tempfile.TemporaryDirectory(prefix="rocelab-bench-report-") as tmp:
        for r in range(args.rounds):
            started = time.perf_counter()
            for name, series, verdict, title in cases:
                runreport.write_report(Path(tmp, f"seq{r}", name), lab, series, tables, verdict, title)
            before.append(time.perf_counter() - started)
            started = time.perf_counter()
            runreport.write_reports(Path(tmp, f"par{r}"), lab, cases, tables)
            after.append(time.perf_counter() - started)
            print(f"round {r + 1}: case by case {before[-1]:.2f} s, write_reports {after[-1]:.2f} s "
                  f"({after[-1] / before[-1]:.2f}×)")
    print(f"{args.cases} cases, {len(ts.series)} series of {args.samples} samples, {os.cpu_count()} CPUs: "
          f"median case by case {statistics.median(before):.2f} s, write_reports {statistics.median(after):.2f} s "
          f"({statistics.median(after) / statistics.median(before):.2f}×)")


if __name__ == "__main__":
    main()
