"""Every command the README tells a user to type works the same from both front doors: the
`invoke` binary reading tasks.py, and the installed `rocelab` console script.

README convention (as in the lab guides): inside ```sh blocks, every line that starts with
`invoke ` is a command a user types, in order, after `bash scripts/quickstart.sh lab` has
brought lab-pfc up. The sequence runs once from a scratch folder, so the files a command
writes (graph PNGs, run reports) land there, its commands typed at the two doors in turn."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_labs import GUIDED, typed_commands

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[2]
DOORS = {
    "invoke": [sys.executable, "-m", "invoke", "--search-root", str(ROOT)],
    "rocelab": [str(Path(sys.executable).with_name("rocelab"))],
}
# A server runs until Ctrl-C: its own live test drives it (tests/live/test_dashboard.py).
LONG_RUNNING = {"dashboard"}
NEEDS_DOCKER = {"images"}


def readme_blocks() -> list[list[list[str]]]:
    """The README's ```sh blocks, each as the argv lists of its `invoke` lines."""
    blocks = typed_commands((ROOT / "README.md").read_text())
    return [[argv for argv in block if argv[0] not in LONG_RUNNING] for block in blocks if block]


def readme_commands() -> list[list[str]]:
    return [argv for block in readme_blocks() for argv in block]


def docker_ready() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, check=False).returncode == 0


def test_the_readme_names_the_commands_a_user_types():
    tasks = {argv[0] for argv in readme_commands()}
    assert {"up", "down", "exec", "graph", "status", "run", "show", "export"} <= tasks
    # The optional positionals left out, as the README tells users to type them.
    assert {("down",), ("graph",), ("show", "counters")} <= {tuple(argv) for argv in readme_commands()}


def test_every_readme_command_runs_from_both_doors(tmp_path):
    """The README's whole sequence once, its commands typed at the two doors in turn: each door
    parses and runs half of them (both take every task, tests/unit/test_cli.py), and the labs
    the sequence brings up are brought up once, not once a door."""
    # A block that builds images or deploys containers needs Docker Engine: without it, the
    # whole block (its later commands act on those containers) is left to a machine that has it.
    docker = docker_ready()
    commands = [argv for block in readme_blocks()
                if docker or not any(a[0] in NEEDS_DOCKER or "docker" in a for a in block) for argv in block]
    doors = sorted(DOORS)

    def run(door: str, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([*DOORS[door], *argv], capture_output=True, text=True, cwd=tmp_path, timeout=600)

    run("rocelab", ["down"])
    ran: set[tuple[str, ...]] = set()
    engine = "netns"
    try:
        assert run("invoke", ["up", "lab-pfc"]).returncode == 0  # what `quickstart.sh lab` leaves
        for index, argv in enumerate(commands):
            door = doors[index % len(doors)]
            if argv[0] == "up":
                engine = argv[argv.index("--engine") + 1] if "--engine" in argv else "netns"
            # A `run` the sequence already typed on the same engine, or a shipped lab's `run` on the
            # netns engine (its guide's test types that: tests/live/test_labs.py), is the same
            # minutes of dilated traffic again, proving nothing new (both doors parse every task:
            # tests/unit/test_cli.py).
            if argv[0] == "run" and ((engine, *argv) in ran or (engine == "netns" and argv[1] in GUIDED)):
                continue
            ran.add((engine, *argv))
            result = run(door, argv)
            where = f"`{door} {shlex.join(argv)}` exited {result.returncode}:\n{result.stderr[-2000:]}"
            assert "Traceback" not in result.stderr, where
            # `run` answers 1 for a verdict that did not pass: the shipped lab must not fail, and
            # may be inconclusive only where its agents fell behind on this machine, as it says.
            inconclusive = argv[0] == "run" and "verdict: inconclusive" in result.stdout
            assert result.returncode == 0 or (result.returncode == 1 and inconclusive), where + result.stdout[-2000:]
    finally:
        run("rocelab", ["down"])
    assert not list(tmp_path.glob("**/Traceback*"))
