"""Every lab with a scenario passes its own checks, and every command its guide tells the
learner to type runs (so no guide goes stale).

Guide convention: inside ```sh blocks of labs/<lab>/README.md, every line that starts with
`invoke ` is a command the learner types, in order, on the lab the guide is about.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "rocelab"]
LABS = sorted(p.parent.name for p in (ROOT / "labs").glob("*/lab.yml") if "scenario:" in p.read_text())
# A lab's guide: labs/challenges/ is a page of break-fix commands, not a lab; its flow runs end
# to end in tests/live/test_node_shell.py.
GUIDED = sorted(p.parent.name for p in (ROOT / "labs").glob("*/README.md") if (p.parent / "lab.yml").is_file())
SH_BLOCK = re.compile(r"```sh\n(.*?)```", re.S)
# The guide's `run` typed for these cases only: the lab's whole scenario runs and is judged in a
# test of its own (lab-training: tests/live/test_training.py), where it would otherwise train twice.
RUN_ONLY = {"lab-training": ["--case", "clean"]}


def typed_commands(text: str) -> list[list[list[str]]]:
    """A page's ```sh blocks, each as the argv lists (after `invoke`) of its `invoke` lines: a
    trailing `# comment` is not typed, and `a && b` is two commands."""
    return [[shlex.split(command)[1:] for line in block.splitlines() if line.strip().startswith("invoke ")
             for command in line.split("#", 1)[0].split("&&")] for block in SH_BLOCK.findall(text)]


def guide_commands(lab: str) -> list[list[str]]:
    return [argv for block in typed_commands((ROOT / "labs" / lab / "README.md").read_text()) for argv in block]


def cli(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    if check:
        assert result.returncode == 0, f"rocelab {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}"
    return result


@pytest.fixture
def clean_slate():
    cli("down", check=False)
    yield
    cli("down", check=False)


def test_every_lab_with_a_scenario_is_run_by_its_guide():
    assert set(LABS) <= set(GUIDED)
    for lab in LABS:
        assert any(argv[:2] == ["run", lab] for argv in guide_commands(lab)), f"{lab}'s guide never runs it"


def run_verdict(lab: str, argv: list[str], cwd: Path) -> dict:
    """`invoke run LAB` as the guide types it, read as JSON."""
    result = subprocess.run([*CLI, *argv, *([] if "--json" in argv else ["--json"])], capture_output=True,
                            text=True, cwd=cwd, timeout=1800)
    assert result.returncode in (0, 1), f"`run {lab}` exited {result.returncode}:\n{result.stderr[-3000:]}"
    return json.loads(result.stdout)


def check_run(lab: str, argv: list[str], cwd: Path) -> str | None:
    """The lab passes its own checks where its agents kept up, once, at the TDF `up` picked. A
    run that fell behind is inconclusive, never failed: None when it passed; why not, when it
    was inconclusive. (It used to come up again at the advised TDF, once: on this project's
    machine that took lab-placement from about 10 to over 20 minutes of the suite, and turned
    one of three inconclusive verdicts in two suite runs.)"""
    doc = run_verdict(lab, argv, cwd)
    failed = [c for c in doc["checks"] if not c["passed"] and not c["inconclusive"]]
    assert doc["verdict"] != "failed", f"{lab} failed: {failed} {[c['error'] for c in doc['cases']]}"
    if doc["verdict"] == "inconclusive":
        return "; ".join(c["fidelity"]["line"] for c in doc["cases"] if not c["fidelity"]["kept_up"])
    if doc["run_dir"]:  # a run the guide asks for with --no-report writes none
        for case in doc["cases"]:
            html = (Path(doc["run_dir"]) / case["case"] / "report.html").read_text()
            assert "data:image/png;base64," in html
        subprocess.run(["rm", "-rf", doc["run_dir"]], check=False)
    return None


@pytest.mark.parametrize("lab", GUIDED)
def test_every_command_in_the_guide_runs_and_the_lab_passes_its_checks(lab, clean_slate, tmp_path):
    commands = guide_commands(lab)
    assert commands, f"labs/{lab}/README.md has no ```sh block with invoke commands"
    inconclusive = None
    for argv in commands:  # `invoke` is the tasks file; the console script is the same front door
        command = f"invoke {shlex.join(argv)}"
        if argv[:2] == ["run", lab]:
            inconclusive = check_run(lab, [*argv, *RUN_ONLY.get(lab, [])], tmp_path) or inconclusive
            continue
        # From a scratch folder: files a command writes (graph PNGs, pcaps, run reports) land there.
        result = subprocess.run([*CLI, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=1800)
        assert result.returncode in (0, 1), f"`{command}` exited {result.returncode}:\n{result.stderr[-3000:]}"
        if argv[0] == "run":  # another lab the guide builds (lab-ecn-dcqcn's own variant)
            assert "verdict: failed" not in result.stdout, f"`{command}`:\n{result.stdout[-3000:]}"
    if inconclusive:
        pytest.skip(f"{lab}: the agents fell behind at the TDF `up` picked, so its checks are inconclusive "
                    f"on this machine now: {inconclusive}")


def test_lossless_incast_drops_nothing_beside_busy_processes(clean_slate):
    """Two processes spinning on this 2-core machine (as CI's own work may) do not make the
    emulation drop on a lossless class: the agents run real-time (rocelab.kernel.loop.claim_cpu).
    As ordinary processes, one such process cost this incast 14-20 drops a run."""
    cli("up", "lab-ecn-dcqcn")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        result = cli("run", "lab-ecn-dcqcn", "--case", "pfc-only", "--json", "--no-report", check=False)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    case = json.loads(result.stdout)["cases"][0]
    observations, fidelity = case["observations"], case["fidelity"]
    # Lossless means no drop, unless the emulation says it fell behind (then the run is inconclusive).
    assert (observations["drops"], observations["retransmitted_packets"]) == (0, 0) or not fidelity["kept_up"], \
        (observations, fidelity["line"])
    assert "without real-time" not in result.stderr, result.stderr
    assert result.returncode == 0 or json.loads(result.stdout)["verdict"] == "inconclusive"
