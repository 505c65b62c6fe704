"""An EOS switch node's commands (rocelab.nodecli.eos) over its running-config, read by the
EOS reader into the profile the real switch core runs: `show qos interfaces`, `show
priority-flow-control [counters]`, `configure session` … `commit` acting on the core, and the
error paths that change nothing. The only stand-in is the control socket (tests/unit/test_nodecli.Agent)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rocelab.model.lab import load_lab
from rocelab.nodecli.eos import COMMANDS, indented
from rocelab.nodecli.node import EosNode, read_events
from rocelab.qos.sonic import dump_config_db
from tests.unit.test_nodecli import Agent

PORTS = ("eth1", "eth2", "eth3", "eth4", "eth5")  # leaf1 of incast-1x5
LEAF1 = """\
! device: leaf1 (DCS-7050CX3-32S, EOS-4.32.2F)
hostname leaf1
qos map dscp 26 to traffic-class 3
qos map dscp 48 to traffic-class 6
!
qos profile ROCE
   qos trust dscp
   priority-flow-control on
   priority-flow-control priority 3 no-drop
   tx-queue 3
      no priority
      bandwidth percent 60
      random-detect ecn minimum-threshold 100 kbytes maximum-threshold 300 kbytes max-mark-probability 20
   tx-queue 6
      priority strict
!
""" + "".join(f"interface Ethernet{i}\n   mtu 9100\n   no switchport\n   service-profile ROCE\n!\n" for i in range(1, 6))


class LeafAgent(Agent):
    """switchd running the config_db `up` wrote from the EOS running-config."""

    def __init__(self, profile: str):
        super().__init__()
        self.profile = profile
        self.switch = self._switch()
        self.admin = {p: "up" for p in PORTS}


@pytest.fixture
def node(lab_home, tmp_path) -> EosNode:
    (lab_home.parent / "leaf1.cfg").write_text(LEAF1)
    lab_home.write_text("topology: incast-1x5\nprofiles:\n  leaf1:\n    eos: leaf1.cfg\n"
                        "    buffer: {pool_size_bytes: 12MiB, dynamic_th: -5, xoff_bytes: 56KiB}\n")
    device = load_lab("l1").node_nos["leaf1"]
    started = tmp_path / "leaf1.config_db.json"  # what the engine writes for switchd
    started.write_text(dump_config_db(device.profile))
    eos = EosNode(tmp_path / "state", "leaf1", LeafAgent(str(started)), {p: 100_000_000_000 for p in PORTS}, 1000,
                  "typed", device)
    (tmp_path / "state").mkdir()
    eos.running()
    return eos


def type_(node: EosNode, line: str, typed: str = ""):
    argv = line.split()
    return CliRunner().invoke(COMMANDS[argv[0]], argv[1:], obj=node, prog_name=argv[0], input=typed)


def test_show_qos_interfaces_names_the_configs_interfaces_and_queues(node):
    out = type_(node, "show qos interfaces Ethernet2")
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[:2] == ["Ethernet2:", "   Trust Mode: DSCP"]
    queue3 = next(line.split() for line in lines if line.split()[:1] == ["3"])
    assert queue3[:3] == ["3", "60", "-"] and queue3[3] == "RR" and "ECN" in queue3
    assert next(line.split() for line in lines if line.split()[:1] == ["6"])[3] == "SP"
    assert "Ethernet1:" not in out.output
    assert type_(node, "show qos interfaces").output.count("Trust Mode") == 5


def test_show_priority_flow_control_and_its_counters(node):
    lines = type_(node, "show priority-flow-control").output.splitlines()
    assert lines[0].split() == ["Port", "Enabled", "No-drop", "priorities", "Watchdog"]
    assert lines[2].split() == ["Et1", "Yes", "3", "No"]
    counters = type_(node, "show priority-flow-control counters").output.splitlines()
    assert counters[0].split() == ["Port", "RxPfc", "TxPfc"] and counters[2].split() == ["Et1", "0", "0"]
    detail = type_(node, "show priority-flow-control counters detail").output.splitlines()
    assert len(detail) == 2 + 8 * (len(counters) - 2)


def test_a_session_commit_changes_what_the_switch_runs(node):
    typed = "interface Ethernet2\nno priority-flow-control priority 3 no-drop\nexit\ncommit\n"
    out = type_(node, "configure session fix1", typed)
    assert out.exit_code == 0, out.output
    assert "restarted the ASIC pipeline" in out.output
    ran = json.loads(open(node.agent.profile).read())  # the config_db switchd reloaded
    assert ran["PORT_QOS_MAP"]["Ethernet4"].get("pfc_enable", "") == "" and ran["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] == "3"
    assert "Et2      Yes" not in type_(node, "show priority-flow-control").output
    assert "no priority-flow-control priority 3 no-drop" in type_(node, "show running-config").output
    assert read_events(node.folder)[-1]["node"] == "leaf1"


def test_an_aborted_or_uncommitted_session_changes_nothing(node):
    before = type_(node, "show running-config").output
    for typed in ("interface Ethernet2\nno priority-flow-control priority 3 no-drop\nabort\n",
                  "interface Ethernet2\nno priority-flow-control priority 3 no-drop\n"):
        out = type_(node, "configure session s2", typed)
        assert out.exit_code == 0 and "not committed; nothing changed" in out.output
    assert type_(node, "show running-config").output == before and node.agent.changes() == []


def test_a_line_the_reader_refuses_changes_nothing(node):
    before = type_(node, "show running-config").output
    out = type_(node, "configure session bad", "qos map dscp 99 to traffic-class 3\ncommit\n")
    assert out.exit_code == 1 and "Error:" in out.output and "leaf1 running-config" in out.output
    assert type_(node, "show running-config").output == before and node.agent.changes() == []
    assert type_(node, "configure sesion x").exit_code == 2
    assert type_(node, "show qos interfaces Ethernet9").exit_code == 1


def test_lines_are_indented_by_the_mode_they_are_typed_in():
    assert indented(["interface Ethernet1", "tx-queue 3", "random-detect ecn count", "exit",
                     "priority-flow-control on", "qos map dscp 26 to traffic-class 3", "!", "qos profile P",
                     "   tx-queue 6", "priority strict"]) == [
        "interface Ethernet1", "   tx-queue 3", "      random-detect ecn count", "   priority-flow-control on",
        "qos map dscp 26 to traffic-class 3", "qos profile P", "   tx-queue 6", "      priority strict"]


def test_shutdown_no_shutdown_and_mtu_in_a_session_act_on_the_link(node):
    out = type_(node, "configure session down", "interface Ethernet3\nshutdown\nmtu 4200\nexit\ncommit\n")
    assert out.exit_code == 0, out.output
    assert "Ethernet8: link admin down" in out.output and node.agent.admin["eth3"] == "down"
    assert ("port", {"port": "eth3", "admin": "down", "mtu": 4200}) in node.agent.requests
    assert node.agent.admin["eth2"] == "up"  # the other ports keep their state
    type_(node, "configure session up", "interface Ethernet3\nno shutdown\nexit\ncommit\n")
    assert node.agent.admin["eth3"] == "up"
    assert "   no shutdown" in type_(node, "show running-config").output
