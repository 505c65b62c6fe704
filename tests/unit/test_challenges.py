"""Every challenge under labs/challenges: its file loads, its seeded fault fails the static
checks over the running config_db, and its documented fix, typed as the give-up says, makes
them pass (the symptom's scenario runs live: tests/live/test_node_shell.py)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from rocelab.model.lab import load_lab
from rocelab.nodecli import challenge as challenges
from rocelab.nodecli.node import SwitchNode, read_events
from rocelab.nodecli.sonic import COMMANDS
from tests.unit.test_nodecli import Agent

PORTS = ("eth1", "eth2", "eth3", "eth4", "eth5")  # leaf1 of incast-1x5


class LeafAgent(Agent):
    def __init__(self):
        super().__init__()
        self.admin = {p: "up" for p in PORTS}


def test_there_are_at_least_six_challenges_each_with_its_page():
    names = challenges.names()
    assert len(names) >= 6
    page = (challenges.challenges_dir() / "README.md").read_text()
    assert all(f"`{name}`" in page for name in names)


@pytest.mark.parametrize("name", challenges.names())
def test_the_fault_fails_the_static_checks_and_the_documented_fix_passes_them(name, tmp_path, monkeypatch):
    chosen = challenges.load(name)
    lab = load_lab(chosen.lab)
    switches = {}
    for node in chosen.fault:
        switch = SwitchNode(tmp_path, node, LeafAgent(), {p: 100_000_000_000 for p in PORTS}, 1000, "fix")
        switch.commit(challenges.seeded(switch.running(), chosen, node), record=False)
        switches[node] = switch
    running = {node: s.running_path for node, s in switches.items()}
    broken = challenges.static_findings(lab, tmp_path / "grade", running)
    solved, lines = challenges.verdict_lines(broken, [])
    assert not solved and lines and read_events(tmp_path) == []
    # It says which check fails where, never the fault: no table, field or value.
    assert all(re.fullmatch(r"static check [a-z-]+: fails on leaf1", line) for line in lines), lines
    for fix in chosen.fix:
        argv = challenges.fix_argv(chosen, fix)
        result = CliRunner().invoke(COMMANDS[argv[0]], argv[1:], obj=switches[fix.node], prog_name=argv[0])
        assert result.exit_code == 0, result.output
    assert challenges.static_findings(lab, tmp_path / "grade", running) == []
