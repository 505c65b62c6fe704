"""Wall time of every lab: `rocelab up LAB`, `rocelab run LAB --no-report`, `rocelab down LAB`.

    python benchmarks/bench_labs.py [LAB ...]

Each lab (default: every folder under labs/ with a scenario) is brought up, run and torn
down through the CLI, as a learner would, one after another, once, at the TDF `up` picks.
Prints each command's wall time, that TDF, the share of its time the agents of its most
delayed case ran more than the fidelity bound behind (stalls: the judgement allows 2%), the lab's
verdict (passed, inconclusive: the agents fell behind, or failed), and the total against the
15-minute budget for the whole set.
Needs root. Keeps its lab records in a state folder of its own, so labs a user has up are
neither seen nor touched.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("ROCELAB_STATE_DIR", tempfile.mkdtemp(prefix="rocelab-bench-"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from rocelab.model.lab import load_lab  # noqa: E402

BUDGET_S = 15 * 60
CLI = [sys.executable, "-m", "rocelab"]


def timed(argv: list[str]) -> tuple[float, int, str]:
    start = time.perf_counter()
    result = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return time.perf_counter() - start, result.returncode, result.stdout


def most_behind(out: str) -> str:
    """The case whose agents ran more than the bound behind for the largest share of its time
    (rocelab.runtime.fidelity.Fidelity.judge_stalls), as a share and the case."""
    with contextlib.suppress(ValueError, KeyError, ZeroDivisionError):
        shares = [(c["fidelity"]["behind_s"]["emulated"] / c["fidelity"]["window_s"]["emulated"], c["case"])
                  for c in json.loads(out)["cases"]]
        share, case = max(shares)
        return f"{share:.2%} ({case})"
    return ""


def verdict(code: int, out: str) -> str:
    with contextlib.suppress(ValueError):
        doc = json.loads(out)
        late = [c["fidelity"]["line"].split(":", 1)[1].split(".")[0].strip() for c in doc["cases"]
                if not c["fidelity"]["kept_up"]]
        return doc["verdict"] + (f" ({late[0]})" if late else "")
    return f"exit {code}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("labs", nargs="*", help="labs to time (default: every lab with a scenario)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_labs: needs root (the netns engine creates namespaces)")
    labs = args.labs or sorted(p.parent.name for p in (ROOT / "labs").glob("*/lab.yml")
                               if load_lab(p.parent.name).scenario is not None)
    table = Table(title=f"labs: up + run + down, wall seconds ({os.cpu_count()} cores)", title_justify="left")
    for column in ("lab", "TDF", "up", "run", "down", "total", "most time behind", "verdict"):
        table.add_column(column, justify="left" if column in ("lab", "verdict") else "right", overflow="fold")
    grand = 0.0
    for lab in labs:
        up_s, code, _ = timed([*CLI, "up", lab])
        if code != 0:
            table.add_row(lab, "", f"{up_s:.1f}", "", "", "", "", f"up failed (exit {code})")
            timed([*CLI, "down", lab])
            continue
        _, _, status = timed([*CLI, "status", "--json"])
        tdf = next((str(s["tdf"]) for s in json.loads(status)["labs"] if s["name"] == lab), "?")
        run_s, code, out = timed([*CLI, "run", lab, "--no-report", "--json"])
        down_s, _, _ = timed([*CLI, "down", lab])
        total = up_s + run_s + down_s
        grand += total
        table.add_row(lab, tdf, f"{up_s:.1f}", f"{run_s:.1f}", f"{down_s:.1f}", f"{total:.1f}", most_behind(out),
                      verdict(code, out))
    console = Console()
    console.print(table)
    console.print(f"whole set: {grand:.0f} s ({grand / 60:.1f} min) of a {BUDGET_S // 60}-minute budget: "
                  f"{'within' if grand <= BUDGET_S else 'OVER'}")


if __name__ == "__main__":
    main()
