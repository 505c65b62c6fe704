"""A switch node's SONiC commands (rocelab.nodecli.sonic) over a real running config_db and
the real switch core: every command's parser, its output's shape, its error paths, and that
a refused change changes nothing. The only stand-in is the control socket: `Agent` answers
switchd's ops from a `Switch` core it rebuilds on every reload, as switchd does."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocelab.model.scenario import SWITCH_COMMANDS
from rocelab.nodecli.node import SwitchNode, read_events
from rocelab.nodecli.sonic import COMMANDS
from rocelab.qos.sonic import load_config_db
from rocelab.switch.agent import load_profile
from rocelab.switch.fib import Fib
from rocelab.switch.pipeline import PortSpec, Switch

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "roce-lossless.json"
PORTS = ("eth1", "eth2", "eth3")


class Agent:
    """switchd's control ops over the pure core."""

    def __init__(self):
        self.profile = str(PROFILE)
        self.requests: list[tuple[str, dict]] = []
        self.admin = {p: "up" for p in PORTS}
        self.reloads = 0
        self.switch = self._switch()

    def _switch(self) -> Switch:
        return Switch("leaf1", [PortSpec(p, f"02:00:00:00:00:0{i}", 1e8) for i, p in enumerate(PORTS, 1)],
                      load_profile(self.profile, 1), Fib({}, frozenset()), random.Random(0))

    def __call__(self, op: str, **fields) -> dict:
        self.requests.append((op, fields))
        if op == "counters":
            return {"counters": self.switch.counters(0.0), "profile": self.profile, "reloads": self.reloads}
        if op == "reload":
            self.profile, self.reloads = fields["profile"], self.reloads + 1
            self.switch = self._switch()
        elif op == "port" and "admin" in fields:
            self.admin[fields["port"]] = fields["admin"]
        elif op == "links":
            return {"links": {p: {"admin": a, "oper": a, "mtu": 9100} for p, a in self.admin.items()}}
        elif op == "fib" and fields.get("kernel"):  # two kernel routes, the second not yet programmed
            return {"routes": {"198.18.0.0/24": [["eth1", "02:aa:00:00:00:01"], ["eth2", "02:aa:00:00:00:02"]]},
                    "local": [], "pending": 1, "down": [],
                    "kernel": [["198.18.0.0/24", 4, [["eth1", "198.18.4.1"], ["eth2", "198.18.4.3"]]],
                               ["198.18.4.0/31", 2, [["eth1", None]]],
                               ["198.19.0.0/16", 4, [["eth2", "198.18.4.3"]]]]}
        return {}

    def changes(self) -> list[tuple[str, dict]]:
        return [r for r in self.requests if r[0] in ("reload", "port")]


@pytest.fixture
def node(tmp_path) -> SwitchNode:
    switch = SwitchNode(tmp_path, "leaf1", Agent(), {p: 100_000_000_000 for p in PORTS}, 1000, "typed")
    switch.running()  # the first read makes the running config from what switchd runs
    return switch


def type_(node: SwitchNode, line: str):
    argv = line.split()
    return CliRunner().invoke(COMMANDS[argv[0]], argv[1:], obj=node, prog_name=argv[0])


def test_the_scenario_model_knows_every_switch_command():
    assert set(SWITCH_COMMANDS) == set(COMMANDS)


def test_show_interfaces_status_in_sonic_columns(node):
    out = type_(node, "show interfaces status").output.splitlines()
    assert out[0].split() == ["Interface", "Lanes", "Speed", "MTU", "FEC", "Alias", "Vlan", "Oper", "Admin", "Type",
                              "Asym", "PFC"]
    assert out[2].split() == ["Ethernet0", "0,1,2,3", "100G", "9100", "N/A", "eth1", "routed", "up", "up", "N/A",
                              "off"]


def test_show_pfc_counters_and_queue_counters_read_the_core(node):
    node.agent.switch._ports[1].pfc_tx_frames[3] = 1234
    out = type_(node, "show pfc counters").output
    rx, tx = out.split("\n\n")
    assert rx.splitlines()[0].split()[:2] == ["Port", "Rx"]
    assert tx.splitlines()[3].split() == ["Ethernet4", "0", "0", "0", "1,234", "0", "0", "0", "0"]
    q = type_(node, "show queue counters Ethernet4").output.splitlines()
    assert q[0].split() == ["Port", "TxQ", "Counter/pkts", "Counter/bytes", "Drop/pkts", "Drop/bytes"]
    assert [line.split()[:2] for line in q[2:]] == [["Ethernet4", f"UC{i}"] for i in range(8)]


def test_what_the_cpu_takes_is_no_rx_drop_but_a_routing_miss_and_a_bad_frame_are(node):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import ICMPv6ND_RS, IPv6
    from scapy.layers.l2 import ARP, Ether

    mac = "02:00:00:00:00:01"  # eth1's
    for frame in (Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(),  # ARP, IPv6 ND: the kernel's, as an ASIC traps them
                  Ether(dst="33:33:00:00:00:02") / IPv6(dst="ff02::2") / ICMPv6ND_RS(),
                  Ether(dst=mac) / IP(src="198.19.1.2", dst="198.19.200.9") / UDP(),  # no route: a discard
                  Ether(dst=mac) / IP(src="198.19.1.2", dst="198.19.200.9")):  # shorter than its IPv4 length
        raw = bytes(frame)
        node.agent.switch.receive("eth1", raw[:-4] if frame.haslayer(IP) and not frame.haslayer(UDP) else raw, 0.0)
    row = type_(node, "show interfaces counters").output.splitlines()[2].split()
    assert row[0] == "Ethernet0" and (row[2], row[5], row[6]) == ("4", "1", "1")  # RX_OK, RX_ERR, RX_DRP


def test_sonic_clear_zeroes_only_its_view(node):
    node.agent.switch._ports[0].pfc_tx_frames[3] = 7
    node.agent.switch._ports[0].rx_packets = 9
    assert type_(node, "sonic-clear pfccounters").output == "Cleared PFC counters\n"
    assert "7" not in type_(node, "show pfc counters").output.split("\n\n")[1].splitlines()[2]
    assert type_(node, "show interfaces counters").output.splitlines()[2].split()[2] == "9"


def test_show_pfc_priority_and_watermarks(node):
    assert type_(node, "show pfc priority").output.splitlines()[2].split() == ["Ethernet0", "3"]
    shared = type_(node, "show priority-group watermark shared").output.splitlines()
    assert shared[0] == "Ingress shared pool occupancy per PG:"
    assert type_(node, "show priority-group watermark headroom").output.startswith("Ingress headroom per PG:")
    assert type_(node, "show queue watermark unicast").output.startswith("Egress shared pool occupancy per unicast")
    assert type_(node, "show priority-group watermark both").exit_code == 2


def test_show_ip_route_and_running_config(node):
    route = type_(node, "show ip route").output.splitlines()
    assert route[0].startswith("Codes: K - kernel route, C - connected") and "q - queued" in route[4]
    listed = route[route.index("") + 1:]
    assert listed[0] == "K>* 198.18.0.0/24 [0/0] via 198.18.4.1, Ethernet0"
    assert listed[1] == "  *                     via 198.18.4.3, Ethernet4"
    assert listed[2] == "C>* 198.18.4.0/31 is directly connected, Ethernet0"
    assert listed[3] == "K>q 198.19.0.0/16 [0/0] via 198.18.4.3, Ethernet4"  # in the kernel, not yet in switchd
    assert type_(node, "show ip route 198.19.7.1").output.splitlines() == [  # FRR's entry for the longest match
        "Routing entry for 198.19.0.0/16", '  Known via "kernel", distance 0, metric 0, best',
        "  q 198.18.4.3, via Ethernet4", ""]
    assert "* directly connected, Ethernet0" in type_(node, "show ip route 198.18.4.0/31").output
    assert type_(node, "show ip route 203.0.113.0/24").output == "% Network not in table\n"
    refused = type_(node, "show ip route bgp")
    assert refused.exit_code == 2 and "at most an address or a prefix" in refused.output
    running = json.loads(type_(node, "show runningconfiguration all").output)
    assert running["PORT"]["Ethernet8"]["alias"] == "eth3" and "WRED_PROFILE" in running


def test_ecnconfig_lists_and_sets_thresholds_live(node):
    listed = type_(node, "ecnconfig -l").output
    assert listed.startswith("Profile: AZURE_LOSSLESS") and "green_min_threshold     102400" in listed
    result = type_(node, "ecnconfig -p AZURE_LOSSLESS -gmin 200000 -gmax 400000")
    assert result.exit_code == 0 and "restarted the ASIC pipeline" in result.output
    wred = load_config_db(node.agent.profile).ports["Ethernet0"].queues[3].wred
    assert (wred.green_min_threshold_bytes, wred.green_max_threshold_bytes) == (200000, 400000)


@pytest.mark.parametrize("line, status, words", [
    ("ecnconfig -p AZURE_LOSSLESS -gmin 500000", 1, "below green_min_threshold"),  # above gmax 307200
    ("ecnconfig -p NO_SUCH -gmin 5", 1, "Invalid profile name"),
    ("ecnconfig -p AZURE_LOSSLESS", 2, "at least one of"),
    ("ecnconfig -p AZURE_LOSSLESS -gdrop 101", 2, "-gdrop"),
    ("ecnconfig -gmin x", 2, "not a valid integer"),
    ("config interface shutdown Ethernet99", 1, "Interface name is invalid"),
    ("config interface pfc priority Ethernet0 3 on", 1, "already been enabled"),
    ("config interface pfc priority Ethernet0 9 on", 2, "0<=x<=7"),
    ("config interface mtu Ethernet0 20", 2, "68<=x<=9216"),
    ("config interface buffer priority-group lossless add Ethernet0 3-9", 1, "Invalid priority group"),
    ("config buffer profile set nosuch --xoff 1", 1, "doesn't exist"),
    ("config rollback nosuch", 1, "does not exist"),
    ("pfcwd start ports Ethernet0 detection-time 50", 2, "100<=x<=5000"),
    ("show nosuch", 2, "No such command"),
])
def test_bad_input_is_refused_and_changes_nothing(node, line, status, words):
    before = type_(node, "show runningconfiguration all").output
    result = type_(node, line)
    assert (result.exit_code, words in result.output) == (status, True), result.output
    assert node.agent.changes() == []
    assert type_(node, "show runningconfiguration all").output == before


def test_apply_patch_checkpoint_rollback(node, tmp_path):
    assert type_(node, "config checkpoint good").output == "Checkpoint created successfully.\n"
    patch = tmp_path / "lossy.json"
    patch.write_text(json.dumps([{"op": "replace", "path": "/DSCP_TO_TC_MAP/ROCE/26", "value": "1"}]))
    result = type_(node, f"config apply-patch {patch}")
    assert result.exit_code == 0 and result.output.endswith("Patch applied successfully.\n")
    assert load_config_db(node.agent.profile).ports["Ethernet0"].dscp_to_tc[26] == 1
    assert json.loads(type_(node, "config list-checkpoints").output) == ["good"]
    assert type_(node, "config rollback good").exit_code == 0
    assert load_config_db(node.agent.profile).ports["Ethernet0"].dscp_to_tc[26] == 3
    events = read_events(tmp_path)
    assert [e["changed"] for e in events] == [["DSCP_TO_TC_MAP/ROCE"], ["DSCP_TO_TC_MAP/ROCE"]]
    assert events[0]["node"] == "leaf1" and events[0]["command"] == "typed"


@pytest.mark.parametrize("patch, words", [
    ([{"op": "replace", "path": "/DSCP_TO_TC_MAP/ROCE/99", "value": "1"}], "does not apply"),
    ([{"op": "replace", "path": "/DSCP_TO_TC_MAP/ROCE/26", "value": "sixteen"}], "DSCP_TO_TC_MAP"),
    ([{"op": "remove", "path": "/BUFFER_PROFILE/pg_lossless_100000_40m_profile"}], "names no BUFFER_PROFILE"),
    ({"op": "remove"}, "is a list of operations"),
])
def test_a_patch_that_fails_or_leaves_an_invalid_config_changes_nothing(node, tmp_path, patch, words):
    before = node.running()
    path = tmp_path / "patch.json"
    path.write_text(json.dumps(patch))
    result = type_(node, f"config apply-patch {path}")
    assert result.exit_code == 1 and "Failed to apply patch due to" in result.output and words in result.output
    assert node.running() == before and read_events(tmp_path) == []


def test_dry_run_and_replace(node, tmp_path):
    patch = tmp_path / "p.json"
    patch.write_text(json.dumps([{"op": "replace", "path": "/WRED_PROFILE/AZURE_LOSSLESS/green_min_threshold",
                                  "value": "150000"}]))
    before = node.running()
    assert type_(node, f"config apply-patch --dry-run {patch}").exit_code == 0 and node.running() == before
    target = tmp_path / "target.json"
    target.write_text(json.dumps(json.loads(PROFILE.read_text()) | {"PORT": before["PORT"]}))
    assert type_(node, f"config replace {target}").output.endswith("Config replaced successfully.\n")


def test_shutdown_startup_and_mtu_act_on_the_link(node):
    assert type_(node, "config interface shutdown Ethernet4").output == "Ethernet4: link admin down\n"
    assert node.agent.requests[-1] == ("port", {"port": "eth2", "admin": "down"})
    status = type_(node, "show interfaces status").output.splitlines()[3].split()
    assert status[0] == "Ethernet4" and status[7:9] == ["down", "down"]
    assert type_(node, "config interface startup Ethernet4").exit_code == 0
    assert node.agent.admin["eth2"] == "up"
    assert type_(node, "config interface mtu Ethernet8 1500").output == "Ethernet8: link mtu 1500\n"


def test_pfc_priority_pfcwd_and_buffers(node):
    assert type_(node, "config interface pfc priority Ethernet0 4 on").exit_code == 0
    assert load_config_db(node.agent.profile).ports["Ethernet0"].pfc_enable == frozenset({3, 4})
    assert type_(node, "config interface pfc priority Ethernet0 3 off").exit_code == 0
    assert load_config_db(node.agent.profile).ports["Ethernet0"].pfc_enable == frozenset({4})
    assert type_(node, "pfcwd stop").exit_code == 0
    assert all(load_config_db(node.agent.profile).ports[p].pfc_wd is None for p in ("Ethernet0", "Ethernet4", "Ethernet8"))
    assert type_(node, "pfcwd start --action drop ports all detection-time 400 --restoration-time 400").exit_code == 0
    config = type_(node, "show pfcwd config").output.splitlines()
    assert config[0].split() == ["PORT", "ACTION", "DETECTION", "TIME", "RESTORATION", "TIME"]
    assert config[2].split() == ["Ethernet0", "drop", "400", "400"]
    stats = type_(node, "show pfcwd stats").output.splitlines()
    assert stats[2].split()[:2] == ["Ethernet0:4", "operational"]
    assert type_(node, "config buffer profile add pg_big --size 0 --xon 18432 --xoff 90000 --dynamic_th -3").exit_code == 0
    assert type_(node, "config interface buffer priority-group lossless add Ethernet0 4 pg_big").exit_code == 0
    assert load_config_db(node.agent.profile).ports["Ethernet0"].pgs[4].xoff_bytes == 90000
    assert type_(node, "config qos clear").exit_code == 0
    assert "WRED_PROFILE" not in node.running()
    assert type_(node, "config qos reload").exit_code == 0
    assert load_config_db(node.agent.profile).ports["Ethernet0"].pfc_enable == frozenset({3})


def test_a_profile_loaded_behind_the_shell_becomes_the_running_config(node):
    type_(node, "config interface shutdown Ethernet4")
    node.agent("reload", profile=str(PROFILE.with_name("lossy.json")))  # a scenario case's `profile:`
    running = node.running()
    assert "WRED_PROFILE" not in running and running["PORT"]["Ethernet4"]["admin_status"] == "down"
    type_(node, "ecnconfig -l")
    assert node.agent.changes()[-1] == ("reload", {"profile": str(PROFILE.with_name("lossy.json"))})
    # The same profile loaded again (the next case) replaces what the shell changed since.
    type_(node, "config interface pfc priority Ethernet0 4 on")
    node.agent("reload", profile=str(PROFILE))
    node.agent("reload", profile=str(PROFILE.with_name("lossy.json")))
    assert "pfc_enable" not in node.running()["PORT_QOS_MAP"].get("Ethernet0", {})


def test_delete_checkpoint(node):
    type_(node, "config checkpoint one")
    assert type_(node, "config delete-checkpoint one").output == "Checkpoint deleted successfully.\n"
    refused = type_(node, "config delete-checkpoint one")
    assert refused.exit_code == 1 and "does not exist; checkpoints: none" in refused.output
