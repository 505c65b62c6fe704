"""lab-training's job on this machine: clean training wall time and step time, and the
slowdown of every impaired case, live.

    python benchmarks/bench_training.py [--runs 1] [--cases clean,latency,loss,both]

Brings lab-training up under its own name, runs its scenario `--runs` times (four PyTorch
DDP workers, gloo over TCP through switchd at TDF 1000), and prints per case: training
time (first step to target accuracy), steps, mean and slowest step, start-up and exit (workers
started to training, and done to gone), each worker's bytes into the fabric against
its ring share, and the slowdown against clean. Times are wall-clock seconds on this
machine. Needs root and the train extra.
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
from rocelab.model.scenario import only_cases  # noqa: E402
from rocelab.runtime.scenario import run  # noqa: E402
from rocelab.train.runner import require_torch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--cases", default="clean,latency,loss,both")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_training: needs root (it creates network namespaces)")
    lab = load_lab("lab-training")
    require_torch(lab.source)
    spec = replace(lab, name=f"btrain{os.getpid() % 10000}")
    scenario = only_cases(lab.scenario, args.cases.split(","), lab.source)
    engine = builtin_engines().get("netns")
    record = calibration.up(engine, spec)
    print(f"{'run':>3s} {'case':8s} {'training':>9s} {'steps':>5s} {'accuracy':>8s} {'mean step':>9s} "
          f"{'max step':>9s} {'start+exit':>10s} {'sent/ring':>9s} {'drops':>6s} {'vs clean':>8s}  outcome")
    try:
        for n in range(1, args.runs + 1):
            result = run(record, scenario, spec.profile, spec.fabric)
            base = result.cases[0].observations["train_time_s"]
            for case in result.cases:
                obs, job = case.observations, case.job
                lead = job["steps"].get("0", [])
                max_step = max((s["step_time_s"] for s in lead), default=float("nan"))
                # wall_s runs from the first worker's start to the last one's exit: the rest
                # of it is start-up (imports, rendezvous) and exit.
                startup = job["wall_s"] - (lead[-1]["elapsed_s"] if lead else 0.0)
                outcome = "STALLED" if obs["stalled"] else ("target" if obs["reached_target"] else "max steps")
                print(f"{n:>3d} {case.case.name:8s} {obs['train_time_s']:>7.2f} s {obs['steps']:>5.0f} "
                      f"{obs['final_accuracy']:>8.3f} {obs['step_time_s'] * 1e3:>6.0f} ms {max_step * 1e3:>6.0f} ms "
                      f"{startup:>8.1f} s {obs['worker_tx_bytes_max'] / obs['ring_bytes_per_worker']:>9.4f} "
                      f"{obs['drops']:>6.0f} {obs['train_time_s'] / base:>7.2f}×  {outcome}")
    finally:
        engine.down(record)
    print("(wall-clock on this machine; sent/ring: the busiest worker's bytes into the fabric over its ring share "
          "2(N−1)/N × gradient bytes × steps)")


if __name__ == "__main__":
    main()
