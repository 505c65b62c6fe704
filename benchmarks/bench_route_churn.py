"""What kernel FIB changes cost the data plane: a ring AllReduce through lab-loss's fabric
(leaf-spine-2x2, switchd, emulated RoCE NICs) with leaf1's kernel routes changing under it N times
a second, against none, in the same run (it brings lab-loss up, and down at the end).

    python benchmarks/bench_route_churn.py [--changes-per-s 20] [--size 8MB] [--tdf 5000] [--rounds 2]

Every change of the kernel's routes, neighbours or links makes switchd read its FIB again (a
converging BGP fabric makes many): a change here adds or deletes a /32 through a spine in leaf1's
namespace, as zebra would. What is printed is the job's fidelity over every agent (due events,
late ones, the p99 and worst lateness and whose it was, on the wall clock) and switchd leaf1's
own worst. Run it from two checkouts to compare two switchds. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-bench-"))

from pyroute2 import IPRoute  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from rocelab.kernel import control  # noqa: E402
from rocelab.kernel.loop import LATENESS_BOUNDS_S  # noqa: E402

CLI = [sys.executable, "-m", "rocelab"]
LAB = "lab-loss"
CHURN_PREFIX = "198.19.250.{}/32"  # outside every host subnet: no frame of the job takes it


def churn(netns: str, gateway: str, oif_name: str, per_s: float, stop: threading.Event) -> int:
    """Add and delete /32s through `gateway` at `per_s` changes a second until `stop`."""
    made = 0
    with IPRoute(netns=netns) as ipr:
        oif = ipr.link_lookup(ifname=oif_name)[0]
        while not stop.wait(1 / per_s):
            prefix = CHURN_PREFIX.format(made // 2 % 200)
            ipr.route("replace" if made % 2 == 0 else "del", dst=prefix, gateway=gateway, oif=oif)
            made += 1
        if made % 2:  # leave no churn route behind for the next round
            ipr.route("del", dst=CHURN_PREFIX.format(made // 2 % 200), gateway=gateway, oif=oif)
    return made


def leaf1_late(before: dict, after: dict, over_s: float) -> tuple[int, int]:
    """switchd leaf1's due events between two readings of its loop, and how many ran more than
    `over_s` late (whole buckets above it: LATENESS_BOUNDS_S)."""
    delta = [a - b for a, b in zip(after["lateness"]["counts"], before["lateness"]["counts"])]
    lower = (0.0, *LATENESS_BOUNDS_S)  # bucket i holds lateness in (lower[i], LATENESS_BOUNDS_S[i]]
    return sum(delta), sum(d for d, low in zip(delta, lower) if low >= over_s)


def run_job(size: str) -> dict:
    result = subprocess.run([*CLI, "traffic", "ring-allreduce", "--lab", LAB, "--size", size, "--iters", "2",
                             "--json"], capture_output=True, text=True, cwd=ROOT)
    if result.returncode not in (0, 1):  # 1: the job ran and its verdict is in the JSON
        sys.exit(f"bench_route_churn: traffic exited {result.returncode}: {result.stderr[-2000:]}")
    return json.loads(result.stdout)["fidelity"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes-per-s", type=float, default=20.0)
    parser.add_argument("--size", default="8MB")
    parser.add_argument("--tdf", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    subprocess.run([*CLI, "up", LAB, "--tdf", str(args.tdf)], check=True, capture_output=True, cwd=ROOT)
    table = Table(title=f"ring AllReduce {args.size} × 2 over lab-loss's leaf-spine-2x2 at TDF {args.tdf}, leaf1's kernel "
                  f"routes changing {args.changes_per_s:g}/s or not", title_justify="left")
    frame_s = 4154 * 8 / 100e9 * args.tdf  # one 4 KB frame on a 100G link, on the wall clock: the fidelity bound
    for column in ("round", "route changes", "due events", "late", "p99", "worst", "worst agent",
                   "leaf1 events", f"leaf1 > {frame_s * 1e3:.2f} ms"):
        table.add_column(column, justify="right")
    try:
        state = json.loads(subprocess.run([*CLI, "status", "--json"], capture_output=True, text=True, cwd=ROOT,
                                          check=True).stdout)
        lab = next(lab for lab in state["labs"] if lab["name"] == LAB)
        leaf1 = next(n for n in lab["nodes"] if n["name"] == "leaf1")
        uplink = next(p for p in leaf1["interfaces"] if p["peer"].startswith("spine1:"))
        spine1_port = next(p for n in lab["nodes"] if n["name"] == "spine1" for p in n["interfaces"]
                           if p["peer"] == f"leaf1:{uplink['name']}")
        gateway = spine1_port["address"].split("/")[0]
        socket = control.socket_path(LAB, "leaf1")
        for n in range(1, args.rounds + 1):
            for per_s in (0.0, args.changes_per_s):
                stop = threading.Event()
                made: list[int] = []
                churner = threading.Thread(target=lambda: made.append(
                    churn(leaf1["netns"], gateway, uplink["name"], per_s, stop))) if per_s else None
                before = control.request(socket, "counters", packed=True)["loop"]
                if churner:
                    churner.start()
                fidelity = run_job(args.size)
                stop.set()
                if churner:
                    churner.join()
                after = control.request(socket, "counters", packed=True)["loop"]
                events, late = leaf1_late(before, after, frame_s)
                table.add_row(str(n), f"{made[0] if made else 0:,}", f"{fidelity['events']:,}",
                              f"{fidelity['late_events']:,}", f"{fidelity['p99_s']['emulated'] * 1e3:.2f} ms",
                              f"{fidelity['worst_s']['emulated'] * 1e3:.2f} ms", str(fidelity["worst_agent"]),
                              f"{events:,}", f"{late:,}")
    finally:
        subprocess.run([*CLI, "down", LAB], capture_output=True, cwd=ROOT)
    Console().print(table)
    Console().print("lateness on the wall clock (production-equivalent: ÷ TDF); the fidelity bound, one 4 KB frame "
                    f"on a 100G link at this TDF, is {frame_s * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
