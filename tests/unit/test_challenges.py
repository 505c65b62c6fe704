"""Every challenge under labs/challenges: its file loads, its seeded fault fails the static
checks over the running config_db and the hosts' running NICs, and its documented fix, typed
as the give-up says, makes them pass (the symptom's scenario runs live:
tests/live/test_node_shell.py)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from rocelab.model.lab import load_lab
from rocelab.nodecli import challenge as challenges
from rocelab.nodecli.host import COMMANDS as HOST_COMMANDS
from rocelab.nodecli.node import HostNode, SwitchNode, read_events
from rocelab.nodecli.sonic import COMMANDS
from tests.unit.test_nodecli import Agent
from tests.unit.test_nodecli_host import Agent as NicAgent

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
    # leaf1 and every host of lab-pfc as `challenge start` finds them, then the fault seeded
    leaf1 = SwitchNode(tmp_path, "leaf1", LeafAgent(), {p: 100_000_000_000 for p in PORTS}, 1000, "fix")
    hosts = {f"h{i}": HostNode(tmp_path, f"h{i}", NicAgent(dict(lab.roce)), "eth1", f"198.19.{i}.2/24",
                               f"02:52:4c:0{i}:01:00", "fix") for i in range(1, 6)}

    def findings() -> list:
        return challenges.static_findings(lab, tmp_path / "grade", {"leaf1": leaf1.running_path},
                                          {name: host.running() for name, host in hosts.items()})

    leaf1.running()
    baseline = {(f.check, f.device) for f in findings()}
    for node in chosen.fault:
        if node in hosts:
            hosts[node].commit(challenges.seeded_nic(hosts[node].running(), chosen, node), record=False)
        else:
            leaf1.commit(challenges.seeded(leaf1.running(), chosen, node), record=False)
    solved, lines = challenges.verdict_lines(findings(), [], baseline)
    assert not solved and lines and read_events(tmp_path) == []
    # It says which check fails where, never the fault: no table, field or value.
    assert all(re.fullmatch(r"static check [a-z-]+: fails on (leaf1|h\d(, h\d)*)", line) for line in lines), lines
    for fix in chosen.fix:
        argv = challenges.fix_argv(chosen, fix)
        node, commands = (hosts[fix.node], HOST_COMMANDS) if fix.node in hosts else (leaf1, COMMANDS)
        result = CliRunner().invoke(commands[argv[0]], argv[1:], obj=node, prog_name=argv[0])
        assert result.exit_code == 0, result.output
    assert challenges.verdict_lines(findings(), [], baseline) == (True, [])


def test_a_finding_the_lab_had_before_its_fault_is_not_the_challenges():
    # lab-pfc's NICs run without DCQCN by design: nic-dcqcn fails there before any fault
    finding = type("Finding", (), {"check": "nic-dcqcn", "device": "leaf1"})()
    assert challenges.verdict_lines([finding], [], {("nic-dcqcn", "leaf1")}) == (True, [])
    assert challenges.verdict_lines([finding], [])[0] is False
