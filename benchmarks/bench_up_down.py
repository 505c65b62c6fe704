"""Time `up` and `down` of leaf-spine-2x2 and leaf-spine-4x4 on an engine (default netns).

    python benchmarks/bench_up_down.py [--runs N] [--engine netns|docker|clab] [--routing static|bgp|both]

For each data plane (kernel forwarding, and switchd: one emulated ASIC process per switch)
two figures per operation: the engine alone (in this process: namespaces, veths,
addresses, routes, agents started and answering) and the whole `rocelab up|down` command
(what a user waits for, Python start-up included). Targets, on netns: 2x2 up ≤ 3 s,
down ≤ 2 s; 4x4 up ≤ 10 s. The container engines build rocelab's images first when they do
not hold this checkout (`invoke images`), outside the timings. `--routing both`, the default,
times each lab with FRR's BGP (what a lab runs unless it says otherwise; `up` returns once every
switch forwards over every spine) beside static routes, alternating, and prints BGP's median
over static's. Needs root.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-bench-"))

from rocelab.runtime import calibration  # noqa: E402
from rocelab.engines import builtin_engines  # noqa: E402
from rocelab.model.lab import load_lab  # noqa: E402

TARGETS_S = {("leaf-spine-2x2", "up"): 3.0, ("leaf-spine-2x2", "down"): 2.0, ("leaf-spine-4x4", "up"): 10.0}


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--engine", default="netns", choices=builtin_engines().names())
    parser.add_argument("--routing", default="both", choices=("static", "bgp", "both"))
    args = parser.parse_args()
    routings = ("static", "bgp") if args.routing == "both" else (args.routing,)
    if os.geteuid() != 0:
        sys.exit("bench_up_down: needs root (it creates network namespaces)")
    engine = builtin_engines().get(args.engine)
    if args.engine != "netns":
        from rocelab.engines.images import ensure_images

        ensure_images()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for topology, dataplane in itertools.product(("leaf-spine-2x2", "leaf-spine-4x4"), ("kernel", "switchd")):
            samples: dict[tuple[str, str, str], list[float]] = {}
            for _, routing in itertools.product(range(args.runs), routings):
                spec = replace(load_lab(topology), name=f"bench-{os.getpid()}", dataplane=dataplane, routing=routing)
                lab_dir = Path(tmp, "labs", f"benchcli-{dataplane}-{routing}")
                lab_dir.mkdir(parents=True, exist_ok=True)
                (lab_dir / "lab.yml").write_text(yaml.safe_dump({
                    "topology": str(ROOT / "topologies" / f"{topology}.yml"), "dataplane": dataplane,
                    "profile": "roce-lossless", "routing": routing}))
                record = None

                def bring_up():
                    nonlocal record
                    record = calibration.up(engine, spec)

                samples.setdefault((routing, "engine", "up"), []).append(timed(bring_up))
                samples.setdefault((routing, "engine", "down"), []).append(timed(lambda: engine.down(record)))
                cli = [sys.executable, "-m", "rocelab"]
                env = {**os.environ, "ROCELAB_HOME": tmp}
                (Path(tmp) / "topologies").mkdir(exist_ok=True)
                (Path(tmp) / "profiles").mkdir(exist_ok=True)
                for profile in (ROOT / "profiles").glob("*.json"):
                    (Path(tmp) / "profiles" / profile.name).write_bytes(profile.read_bytes())
                samples.setdefault((routing, "command", "up"), []).append(timed(lambda: subprocess.run(
                    [*cli, "up", lab_dir.name, "--engine", args.engine], check=True, capture_output=True, env=env)))
                samples.setdefault((routing, "command", "down"), []).append(timed(lambda: subprocess.run(
                    [*cli, "down", lab_dir.name], check=True, capture_output=True, env=env)))
            nodes = len(load_lab(topology).fabric.nodes)
            for (routing, how, op), values in samples.items():
                target = TARGETS_S.get((topology, op)) if args.engine == "netns" and routing == "static" else None
                verdict = "" if target is None or how == "engine" else ("meets" if max(values) <= target else "MISSES")
                static = samples.get(("static", how, op)) if routing == "bgp" else None
                ratio = f"{statistics.median(values) / statistics.median(static):.2f}× static" if static else ""
                rows.append((topology, dataplane, nodes, routing, op, how, min(values), statistics.median(values),
                             max(values), "  ".join(x for x in (f"{verdict} ≤ {target:g} s" if verdict else "", ratio)
                                                    if x)))
    print(f"engine {args.engine}")
    print(f"{'topology':16} {'dataplane':9} {'nodes':>5} {'routing':7} {'op':5} {'what':8} {'min s':>7} "
          f"{'median s':>8} {'max s':>7}  target or ratio ({args.runs} runs)")
    for topology, dataplane, nodes, routing, op, how, lo, med, hi, note in rows:
        print(f"{topology:16} {dataplane:9} {nodes:5} {routing:7} {op:5} {how:8} {lo:7.3f} {med:8.3f} {hi:7.3f}  {note}")


if __name__ == "__main__":
    main()
