"""What a data frame costs the agents, and the TDF every shipped lab gets from it.

    python benchmarks/bench_frame_cost.py [--tdf 250]

1. The calibration lab (rocelab.runtime.calibration: twelve hosts on 100G, 20G and 4G ports of a
   leaf, another behind a spine and a second leaf) at --tdf, three elephant flows each alone
   on the first leaf, so three frame rates 5x apart, the fastest again over three switches, and
   the second four times at once (flows that share the agents' wake-ups): per flow, switchd's
   CPU per hop and a NIC's per data frame (/proc/PID/schedstat; where one nicd serves the
   hosts, its share of that CPU), how often each process slept and woke per data frame (the
   agents' loop counters), and how late the flow's agents ran their due events (p99, wall). First as `up` runs them here (switchd's C pipeline running
   its own loop, where built; one nicd for all hosts, its loop in C where built), then, in the
   same run, the references: one nicd per host (as the container engines run them), and
   ROCELAB_PURE_SWITCH=1 with ROCELAB_PURE_LOOP=1 (the Python pipeline, and both agents in the
   Python loop); the ratios.
2. The auto TDF every shipped lab gets from the first set of figures (rocelab.model.tdf), and
   the case and agent that decide it.
Needs root. Run `python benchmarks/bench_labs.py` for each lab's run at that TDF.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-bench-"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from rocelab import paths  # noqa: E402
from rocelab.kernel.loop import PURE_LOOP_ENV, loop_shell  # noqa: E402
from rocelab.model.lab import load_lab  # noqa: E402
from rocelab.model.tdf import choose_tdf  # noqa: E402
from rocelab.roce.config import roce_config  # noqa: E402
from rocelab.runtime import calibration  # noqa: E402
from rocelab.switch.fastpath import PURE_ENV, switchd_pipeline  # noqa: E402


def first_parenthesis(text: str) -> str:
    """What the first parenthesis of `text` holds, parentheses inside it included."""
    start = text.index("(") + 1
    depth = 1
    for i, char in enumerate(text[start:], start):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if not depth:
            return text[start:i]
    return text[start:]


def per_hop_us(f: calibration.FlowCost) -> float:
    return f.switch_cores() / (f.frames_per_s * f.pairs * len(f.switches)) * 1e6


def flow_table(title: str, flows: list[calibration.FlowCost]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("flow", "frames/s", "switchd µs/hop", "wake-ups/frame", "nicd µs/frame per NIC",
                   "nicd wake-ups/frame", "lateness p99"):
        table.add_column(column, justify="left" if column == "flow" else "right")
    for f in flows:
        woke = f.per_frame("leaf1")[1]
        # each nicd process once: one serving every host (the netns engine's), or one per host
        nic_woke = sum(f.per_frame(host)[1] for host in {f.pids[h]: h for h in f.hosts}.values())
        pairs = f"{f.pairs} pairs at once, as " if f.pairs > 1 else ""
        table.add_row(f"{pairs}{' → '.join((f.src, *f.switches, f.dst))}", f"{f.frames_per_s:,.0f}", f"{per_hop_us(f):.1f}",
                      f"{woke:.2f}",
                      f"{f.nic_cores() / f.frames_per_s * 1e6:.1f}", f"{nic_woke:.2f}", f"≤{f.late_p99_s * 1e3:.2g} ms")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tdf", type=int, default=calibration.CALIBRATION_TDF,
                        help=f"TDF of the calibration lab (default {calibration.CALIBRATION_TDF}, as `up` calibrates)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_frame_cost: needs root (the netns engine creates namespaces)")
    console = Console(width=200)
    runs = {}
    for label, pure, shared in ((f"switchd {switchd_pipeline()} pipeline, one nicd for all hosts, its loop in "
                                 f"{loop_shell()}", False, True),
                                ("reference for nicd: one nicd per host", False, False),
                                ("references for switchd and nicd's loop: ROCELAB_PURE_SWITCH=1 ROCELAB_PURE_LOOP=1",
                                 True, True)):
        if pure:
            os.environ[PURE_ENV] = os.environ[PURE_LOOP_ENV] = "1"
        flows = calibration.measure_flows("bench-frame-cost", args.tdf, shared_agents=shared)
        os.environ.pop(PURE_ENV, None)
        os.environ.pop(PURE_LOOP_ENV, None)
        runs[label] = flows
        console.print(flow_table(f"{label}, TDF {args.tdf}, {os.cpu_count()} cores", flows))
    (here, here_flows), (_, per_host), (_, pure_flows) = runs.items()
    console.print("switchd CPU per hop against the Python reference, same flows: " + ", ".join(
        f"{a.frames_per_s:,.0f} frames/s through {len(a.switches)} {per_hop_us(a) / per_hop_us(b):.2f}x"
        for a, b in zip(here_flows, pure_flows)))
    console.print("nicd CPU per NIC and frame, its loop in C against the Python loop, same flows: " + ", ".join(
        f"{a.frames_per_s:,.0f} frames/s {a.nic_cores() / a.frames_per_s / (b.nic_cores() / b.frames_per_s):.2f}x"
        for a, b in zip(here_flows, pure_flows)))
    console.print("nicd CPU per NIC and frame, one nicd for all hosts against one per host, same flows: " + ", ".join(
        f"{a.frames_per_s:,.0f} frames/s {a.nic_cores() / a.frames_per_s / (b.nic_cores() / b.frames_per_s):.2f}x"
        for a, b in zip(here_flows, per_host)))
    costs = calibration.costs_of(here_flows)
    console.print(f"the agents' lateness, p99 in the fastest flow (what `up` takes): ≤{costs.late_p99_s * 1e3:.2g} ms "
                  f"(wall)")
    table = Table(title=f"auto TDF of every shipped lab from the {here} figures", title_justify="left")
    for column in ("lab", "auto TDF", "load", "what decides it"):
        table.add_column(column, justify="right" if column in ("auto TDF", "load") else "left", overflow="fold")
    for lab_dir in sorted(p for p in paths.labs_dir().iterdir() if (p / "lab.yml").exists()):
        lab = load_lab(lab_dir.name)
        choice = choose_tdf(lab.fabric, lab.scenario, roce_config(lab.roce).pmtu_bytes, costs, floor=lab.tdf_floor,
                            bound_s=lab.fidelity_bound_s or 0.0, nicd=lab.runs_nicd)
        pinned = f" (lab.yml pins {lab.tdf})" if lab.tdf else ""
        table.add_row(lab_dir.name, f"{choice.tdf}{pinned}", f"{choice.load:.0%}",
                      first_parenthesis(choice.why))
    console.print(table)


if __name__ == "__main__":
    main()
