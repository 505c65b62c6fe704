"""A host node's NIC commands (rocelab.nodecli.host) over the real NIC core: every command's
parser, its output read back by the readers a real host's saved files go through
(rocelab.qos.nic), error paths that change nothing, and the NIC acting on each change. The
only stand-in is the control socket: `Agent` answers nicd's `nic` and `set_nic` as nicd does,
reconfiguring a real `Nic`."""

from __future__ import annotations

import random

import pytest
from click.testing import CliRunner

from rocelab.model.hostnics import HostNic, nic_view, nicd_roce
from rocelab.model.scenario import HOST_COMMANDS
from rocelab.nodecli.host import COMMANDS
from rocelab.nodecli.node import HostNode, read_events
from rocelab.qos.nic import read_mlnx_qos, read_nic_sysfs
from rocelab.reporting import nic_cli
from rocelab.roce import Nic, dilate
from rocelab.roce.config import roce_config
from rocelab.roce.wire import PauseFrame

RATE_BPS = 100e9
TDF = 1000


class Agent:
    """nicd's `nic` and `set_nic` over the NIC core."""

    def __init__(self, settings: dict):
        self.settings = settings
        self.nic = Nic("02:52:4c:01:01:00", "198.19.1.2", RATE_BPS / TDF, dilate(roce_config(settings), TDF),
                       rng=random.Random(0))
        self.changes: list[dict] = []

    def __call__(self, op: str, **fields) -> dict:
        if op == "nic":
            return {"settings": self.settings, "port_rate_bps": RATE_BPS}
        if op == "counters":
            return {"counters": self.nic.counters(), "tdf": TDF}
        assert op == "set_nic"
        merged = {**self.settings, **fields["settings"]}
        self.nic.reconfigure(dilate(roce_config(merged), TDF))
        self.settings = merged
        self.changes.append(fields["settings"])
        return {"settings": merged}


@pytest.fixture
def agent() -> Agent:
    return Agent({"cc_algorithm": "dcqcn"})


@pytest.fixture
def node(tmp_path, agent) -> HostNode:
    return HostNode(tmp_path, "h1", agent, "eth1", "198.19.1.2/24", "02:52:4c:01:01:00", "typed")


def type_(node: HostNode, line: str):
    argv = line.split()
    return CliRunner().invoke(COMMANDS[argv[0]], argv[1:], obj=node, prog_name=argv[0])


def test_the_scenario_model_knows_the_host_commands_a_case_may_type():
    assert set(HOST_COMMANDS) <= set(COMMANDS) and "ib_write_bw" not in HOST_COMMANDS


def test_mlnx_qos_prints_what_the_nic_runs_and_reads_back_as_a_real_hosts_file(node):
    out = type_(node, "mlnx_qos -i eth1")
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    assert lines[:3] == ["DCBX mode: OS controlled", "Priority trust state: dscp", "dscp2prio mapping:"]
    assert "\tprio:3 dscp:26," in lines and "\tprio:6 dscp:48," in lines
    assert lines[lines.index("PFC configuration:") + 2].split() == ["enabled", "0", "0", "0", "1", "0", "0", "0", "0"]
    read = read_mlnx_qos(out.stdout, "h1.mlnx_qos.txt")
    view = node.running()
    for field in ("trust", "pfc_priorities", "dscp_to_priority", "priority_to_tc", "tsa"):
        assert getattr(read, field) == getattr(view, field), field


def test_mlnx_qos_sets_trust_pfc_and_dscp2prio_live(node, agent):
    out = type_(node, "mlnx_qos -i eth1 --trust pcp --pfc 0,0,0,1,1,0,0,0 --dscp2prio set,24,3")
    assert out.exit_code == 0, out.output
    read = read_mlnx_qos(out.stdout, "h1.txt")
    assert (read.trust, read.pfc_priorities, read.dscp_to_priority[24]) == ("pcp", {3, 4}, 3)
    config = agent.nic.config
    assert (config.trust, config.pfc_enabled(), config.dscp_to_priority[24]) == ("pcp", {3, 4}, 3)
    assert config.priority_of(26) == 0  # untagged RoCE under PCP trust: priority 0
    assert read_events(node.folder)[-1]["changed"] == ["trust", "pfc_priorities", "dscp_to_priority"]
    # del puts the device's default back (DSCP >> 3)
    type_(node, "mlnx_qos -i eth1 --dscp2prio del,24,3")
    assert agent.nic.config.dscp_to_priority[24] == 3 and node.running().dscp_to_priority[24] == 3


def test_the_nic_obeys_pfc_only_on_its_enabled_priorities(node, agent):
    def paused(priority: int) -> bool:
        agent.nic._on_pause(PauseFrame(tuple(0xFFFF if p == priority else None for p in range(8))), 0.0)
        return agent.nic._pause.until_s[priority] > 0

    assert not paused(4)
    type_(node, "mlnx_qos -i eth1 --pfc 0,0,0,1,1,0,0,0")
    assert paused(4)
    assert agent.nic.counters()["pfc"]["rx_pause_frames"][4] == 2  # the ignored one was counted too


@pytest.mark.parametrize("line, message", [
    ("mlnx_qos -i eth2", "eth2: no such RoCE interface on h1 (its port is eth1)"),
    ("mlnx_qos -i eth1 --pfc 0,0,1", "Invalid value for '-f' / '--pfc': '0,0,1': expected eight 0/1 flags"),
    ("mlnx_qos -i eth1 --dscp2prio set,64,3", "expected set,DSCP,PRIO or del,DSCP,PRIO"),
    ("mlnx_qos -i eth1 --dscp2prio del,26,4", "DSCP 26 is on priority 3, not 4"),
    ("mlnx_qos -i eth1 --trust cos", "'cos' is not one of 'pcp', 'dscp'"),
    ("mlnx_qos -i eth1 --tsa ets,ets,ets,ets,ets,ets,ets,ets", "--tsa is not emulated: nicd has no ETS"),
    ("mlnx_qos --trust dscp", "Missing option '-i' / '--interface'"),
    ("cma_roce_tos -t 256", "256 is not in the range 0<=x<=255"),
    ("cma_roce_tos -d mlx5_1 -t 106", "mlx5_1: no such RDMA device"),
    ("sysfs /sys/class/net/eth1/ecn/roce_rp/rpg_ai_rate five", "'five' is not a whole number"),
    ("sysfs /sys/class/net/eth1/ecn/roce_rp/rpg_nonsense 5", "no such file; roce_rp: clamp_tgt_rate"),
    ("sysfs /sys/class/net/eth1/ecn/roce_rp/rpg_max_rate 1000", "not emulated"),
    ("sysfs /sys/class/net/eth1/ecn/roce_np/enable/3 0", "not emulated"),
    ("sysfs /sys/class/net/eth1/ecn/roce_np/cnp_802p_prio 5", "change the map"),
    ("sysfs /sys/class/net/eth2/ecn/roce_np/cnp_dscp 40", "h1's RoCE port is eth1"),
    ("sysfs /sys/class/net/eth1/ecn/roce_np/cnp_dscp 64", "cnp_dscp=64 must be 0..63"),
    ("sysfs /proc/nothing", "no such file or directory"),
    ("show_gids mlx5_9", "no such RDMA device"),
])
def test_bad_input_says_why_and_changes_nothing(node, agent, line, message):
    before = type_(node, "mlnx_qos -i eth1").stdout
    out = type_(node, line)
    assert out.exit_code in (1, 2) and message in out.stderr, out.stderr
    assert agent.changes == [] and type_(node, "mlnx_qos -i eth1").stdout == before


def test_sysfs_reads_as_the_collection_loop_and_writes_dcqcn_live(node, agent):
    out = type_(node, "sysfs").stdout
    read = read_nic_sysfs(out, "h1.sysfs.txt")
    view = node.running()
    for field in ("dcqcn_rp", "dcqcn_np", "rp_enabled", "np_enabled", "roce_tos"):
        assert getattr(read, field) == getattr(view, field), field
    assert type_(node, "sysfs /sys/class/net/eth1/ecn/roce_rp/rpg_ai_rate").stdout == "5\n"
    assert type_(node, "sysfs /sys/class/net/eth1/ecn/roce_rp/rpg_ai_rate 20").exit_code == 0
    assert agent.nic.config.cc.dcqcn.rate_ai_bps == 20e6 / TDF
    assert type_(node, "sysfs /sys/class/net/eth1/ecn/roce_np/cnp_dscp 46").exit_code == 0
    assert agent.nic.config.cnp_dscp == 46
    # DCQCN off for RoCE's priority: the NIC's QPs connect without it
    assert type_(node, "sysfs /sys/class/net/eth1/ecn/roce_rp/enable/3 0").exit_code == 0
    assert agent.nic.config.cc_algorithm == "none"
    assert "/sys/class/net/eth1/ecn/roce_rp/enable/3=0" in type_(node, "sysfs /sys/class/net/eth1/ecn/roce_rp").stdout


def test_cma_roce_tos_sets_the_dscp_of_new_connections(node, agent):
    assert type_(node, "cma_roce_tos").stdout == "104\n"
    assert type_(node, "cma_roce_tos -d mlx5_0 -t 106").exit_code == 0
    assert agent.nic.config.dscp == 26 and type_(node, "cma_roce_tos").stdout == "106\n"
    assert type_(node, "cma_roce_tos -t 96").exit_code == 0
    assert agent.nic.config.dscp == 24
    assert read_nic_sysfs(type_(node, "sysfs /sys/kernel").stdout, "h1.txt").roce_tos == 96


def test_a_setting_changed_behind_the_shell_is_what_it_shows(node, agent):
    node.running()
    agent.settings = {"cc_algorithm": "none"}  # a case's set_cc
    assert type_(node, "sysfs /sys/class/net/eth1/ecn/roce_rp/enable/3").stdout == "0\n"


def test_the_view_and_nicds_settings_are_each_others_inverse():
    for settings in ({}, {"cc_algorithm": "none", "trust": "pcp", "pfc_priorities": [3, 4]},
                     {"dscp": 24, "cnp_dscp": 46, "dscp_to_priority": {24: 3, 46: 6}, "dcqcn": "connectx"}):
        view = nic_view(settings, RATE_BPS)
        again, notes = nicd_roce(HostNic("h1", None, None, view), {})
        assert nic_view(again, RATE_BPS) == view and notes == []


def test_show_gids_lists_the_ports_roce_v2_gids(node):
    lines = type_(node, "show_gids").stdout.splitlines()
    assert lines[0].split() == ["DEV", "PORT", "INDEX", "GID", "IPv4", "VER", "DEV"]
    assert lines[2].split() == ["mlx5_0", "1", "0", "fe80:0000:0000:0000:0052:4cff:fe01:0100", "v2", "eth1"]
    assert lines[3].split() == ["mlx5_0", "1", "1", "0000:0000:0000:0000:0000:ffff:c613:0102", "198.19.1.2", "v2", "eth1"]
    assert lines[-1] == "n_gids_found=2"


@pytest.mark.parametrize("line, option", [("ib_read_lat -n x 198.19.5.2", "-n"), ("ib_read_bw -s 0", "-s"),
                                          ("ib_read_bw -q 65", "-q"), ("ib_read_lat -d mlx5_9", None)])
def test_perftest_bad_options_say_which_and_change_nothing(node, line, option):
    out = type_(node, line)
    if option is None:  # a device that is not there: an error, as perftest's
        assert out.exit_code == 1 and "mlx5_9: no such RDMA device" in out.stderr
    else:
        assert out.exit_code == 2 and f"'{option}'" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("test", ["ib_write_bw", "ib_write_lat", "ib_read_bw", "ib_read_lat"])
def test_a_perftest_client_without_a_server_cannot_connect(node, test):
    out = type_(node, f"{test} 198.19.5.2")
    assert out.exit_code == 1 and "Couldn't connect to 198.19.5.2:18515" in out.stderr


def test_the_ping_pong_pattern_is_one_round_trip_per_iteration():
    from rocelab.traffic.patterns import PatternError, Step, Transfer, builtin_patterns

    pattern = builtin_patterns().get("pingpong")
    steps = pattern.plan(("h1", "h5"), 2).steps
    assert list(steps["h1"]) == [Step(sends=(Transfer("h5", 2),)), Step(recvs=(Transfer("h5", 2),))]
    assert list(steps["h5"]) == [Step(recvs=(Transfer("h1", 2),)), Step(sends=(Transfer("h1", 2),))]
    with pytest.raises(PatternError):
        pattern.plan(("h1", "h2", "h3"), 2)


def test_perftest_latency_block_in_production_microseconds():
    from rocelab.reporting.nic_cli import perftest_lat

    out = perftest_lat({"message_bytes": 2, "iterations": 4, "latency_s": [0.006, 0.006, 0.012, 0.024], "tdf": 6000,
                        "resolution_s": 0.002}).splitlines()
    assert out[0].split()[:4] == ["#bytes", "#iterations", "t_min[usec]", "t_max[usec]"]
    assert out[1].split()[:5] == ["2", "4", "1.00", "4.00", "1.50"]  # t_typical: the median
    assert "to within 0.33 usec" in out[3]


def test_ethtool_s_counts_pause_per_pfc_priority_in_production_microseconds(node, agent):
    quanta = 0xFFFF
    agent.nic._on_pause(PauseFrame(tuple(quanta if p == 3 else None for p in range(8))), 0.0)
    agent.nic._on_pause(PauseFrame(tuple(0 if p == 3 else None for p in range(8))), 0.002)  # XON 2 ms later
    out = type_(node, "ethtool -S eth1")
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    stats = dict(line.strip().split(": ") for line in lines[1:])
    assert lines[0] == "NIC statistics:" and all(line.startswith("     ") for line in lines[1:])
    assert (stats["rx_prio3_pause"], stats["rx_prio3_pause_transition"], stats["tx_prio3_pause"]) == ("2", "1", "0")
    # 2 ms emulated at TDF 1000: 2 µs, as the production NIC would have counted it
    assert stats["rx_prio3_pause_duration"] == "2"
    assert "rx_prio4_pause" not in stats  # PFC is off on 4: mlx5 lists the enabled priorities
    type_(node, "mlnx_qos -i eth1 --pfc 0,0,0,1,1,0,0,0")
    assert "rx_prio4_pause" in type_(node, "ethtool -S eth1").stdout
    assert type_(node, "ethtool eth1").stdout.splitlines()[1] == "\tSpeed: 100000Mb/s"
    wrong = type_(node, "ethtool -S eth2")
    assert wrong.exit_code == 1 and "eth2: no such RoCE interface on h1" in wrong.output


def test_the_ports_hw_counters_are_nicds_under_connectx_names_and_read_only(node):
    counters = {ours: 10 + i for i, ours in enumerate([*nic_cli.HW_COUNTERS.values(), "cnps_received"])}
    files = nic_cli.hw_counters(counters, dcqcn=True)
    base = "/sys/class/infiniband/mlx5_0/ports/1/hw_counters"
    assert files[f"{base}/np_cnp_sent"] == str(counters["cnps_sent"])
    assert (files[f"{base}/rp_cnp_handled"], files[f"{base}/rp_cnp_ignored"]) == (str(counters["cnps_received"]), "0")
    without = nic_cli.hw_counters(counters, dcqcn=False)  # no reaction point: the CNPs are ignored
    assert (without[f"{base}/rp_cnp_handled"], without[f"{base}/rp_cnp_ignored"]) == ("0", str(counters["cnps_received"]))
    assert files[f"{base}/np_ecn_marked_roce_packets"] == str(counters["ce_received"])
    assert files[f"{base}/local_ack_timeout_err"] == str(counters["timeouts"])
    listed = type_(node, f"sysfs {base}")
    assert listed.exit_code == 0 and f"{base}/out_of_sequence=0" in listed.stdout.splitlines()
    assert type_(node, f"sysfs {base}/np_cnp_sent").stdout == "0\n"
    refused = type_(node, f"sysfs {base}/np_cnp_sent 5")
    assert refused.exit_code == 1 and "read-only" in refused.output
