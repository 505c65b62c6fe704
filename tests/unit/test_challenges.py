"""Every challenge under labs/challenges: its file loads, its seeded fault fails the static
checks over the running config_db and the hosts' running NICs, and its documented fix, typed
as the give-up says, makes them pass (every challenge runs live, its symptom's scenario with it:
tests/live/test_node_shell.py)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from rocelab.errors import InputError
from rocelab.model.lab import load_lab
from rocelab.nodecli import challenge as challenges
from rocelab.nodecli.host import COMMANDS as HOST_COMMANDS
from rocelab.nodecli.node import HostNode, SwitchNode, read_events
from rocelab.nodecli.sonic import COMMANDS
from tests.unit.test_nodecli import Agent
from tests.unit.test_nodecli_host import Agent as NicAgent

class LeafAgent(Agent):
    def __init__(self):
        super().__init__()
        self.admin = {f"eth{i}": "up" for i in range(1, 6)}


def test_there_are_at_least_six_challenges_each_with_its_page():
    names = challenges.names()
    assert len(names) >= 6
    page = (challenges.challenges_dir() / "README.md").read_text()
    assert all(f"`{name}`" in page for name in names)


@pytest.mark.parametrize("name", challenges.names())
def test_the_fault_fails_the_static_checks_and_the_documented_fix_passes_them(name, tmp_path, monkeypatch):
    chosen = challenges.load(name)
    lab = load_lab(chosen.lab)
    # every switch and host of the lab as `challenge start` finds them, then the fault seeded
    switches = {s.name: SwitchNode(tmp_path, s.name, LeafAgent(), {p.name: 100_000_000_000 for p in s.ports}, 1000, "fix")
                for s in lab.fabric.switches}
    hosts = {h.name: HostNode(tmp_path, h.name, NicAgent(dict(lab.roce)), h.ports[0].name, str(h.ports[0].address),
                              h.ports[0].mac, "fix") for h in lab.fabric.hosts}

    def findings() -> list:
        return challenges.static_findings(lab, tmp_path / "grade", {n: s.running_path for n, s in switches.items()},
                                          {name: host.running() for name, host in hosts.items()})

    for switch in switches.values():
        switch.running()
    baseline = {(f.check, f.device) for f in findings()}
    for node in chosen.fault:
        if node in hosts:
            hosts[node].commit(challenges.seeded_nic(hosts[node].running(), chosen, node), record=False)
        else:
            switches[node].commit(challenges.seeded(switches[node].running(), chosen, node), record=False)
    solved, lines = challenges.verdict_lines(findings(), [], baseline)
    assert not solved and lines and read_events(tmp_path) == []
    # It says which check fails where, never the fault: no table, field or value.
    assert all(re.fullmatch(r"static check [a-z-]+: fails on [a-z0-9]+(, [a-z0-9]+)*", line) for line in lines), lines
    for fix in chosen.fix:
        argv = challenges.fix_argv(chosen, fix)
        node, commands = (hosts[fix.node], HOST_COMMANDS) if fix.node in hosts else (switches[fix.node], COMMANDS)
        result = CliRunner().invoke(commands[argv[0]], argv[1:], obj=node, prog_name=argv[0])
        assert result.exit_code == 0, result.output
    assert challenges.verdict_lines(findings(), [], baseline) == (True, [])


def test_a_finding_the_lab_had_before_its_fault_is_not_the_challenges():
    # lab-pfc's NICs run without DCQCN by design: nic-dcqcn fails there before any fault
    finding = type("Finding", (), {"check": "nic-dcqcn", "device": "leaf1"})()
    assert challenges.verdict_lines([finding], [], {("nic-dcqcn", "leaf1")}) == (True, [])
    assert challenges.verdict_lines([finding], [])[0] is False


def test_a_symptom_that_failed_while_the_emulation_fell_behind_is_inconclusive_not_failed():
    solved, lines = challenges.verdict_lines([], [("drops == 0", False, 3.0)], behind=True)
    assert not solved and lines == ["symptom: drops == 0: inconclusive: the emulation fell behind, check again "
                                    "(observed 3)"]
    assert challenges.verdict_lines([], [("drops == 0", False, 3.0)]) == (False, ["symptom: drops == 0: fails (observed 3)"])
    assert challenges.verdict_lines([], [("drops == 0", True, 0.0)], behind=True) == (
        True, ["symptom: drops == 0: passes (observed 0)"])


def test_a_symptom_scenario_is_read_as_a_case_of_the_challenges_lab(lab_home):
    lab_home.write_text("topology: incast-1x5\nnic: emulated\n")
    (lab_home.parents[1] / "challenges").mkdir()
    bad = lab_home.parents[1] / "challenges" / "bad.yml"
    head = "title: t\nlab: l1\nsymptom: s\nhint: h\nfault: {leaf1: []}\nanswer: a\nfix: []\n"
    bad.write_text(head + "run: {traffic: elephant, storm: {host: h9}, checks: [\"stalled == 0\"]}\n")
    with pytest.raises(InputError, match="is not a PFC storm"):
        challenges.load("bad")
    bad.write_text(head + "run: {traffic: elephant, with: {hosts: [h1, h2]}, storm: {host: h3}, checks: [\"stalled == 0\"]}\n")
    loaded = challenges.load("bad").scenario
    assert loaded.cases[0].storm.host == "h3" and loaded.cases[0].traffic.hosts == ("h1", "h2")
    assert [c.text for c in loaded.checks] == ["symptom: stalled == 0"]
