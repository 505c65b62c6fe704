"""The NIC readers (rocelab.qos.nic) on hand-written samples in the tools' own output format:
`mlnx_qos -i IFACE` as two generations of the tool print it, and the collection command of
docs/hosts.md (sysfs PATH=VALUE lines, then `ip link show`)."""

from __future__ import annotations

from typing import Callable

import pytest

from rocelab.errors import InputError
from rocelab.qos.nic import HostNicConfig, combine, read_mlnx_qos, read_nic_sysfs, roce_mtu_for

# A current mlnx_qos: trust dscp, the dscp2prio map, receive buffers with the total after
# them, a PFC table with its buffer row, and an ETS block per TC (TC 6 strict).
MLNX_QOS_DSCP = """\
DCBX mode: OS controlled
Priority trust state: dscp
dscp2prio mapping:
        prio:0 dscp:07,06,05,04,03,02,01,00,
        prio:1 dscp:15,14,13,12,11,10,09,08,
        prio:2 dscp:23,22,21,20,19,18,17,16,
        prio:3 dscp:31,30,29,28,27,25,24,
        prio:4 dscp:39,38,37,36,35,34,33,32,26,
        prio:5 dscp:47,46,45,44,43,42,41,40,
        prio:6 dscp:55,54,53,52,51,50,49,48,
        prio:7 dscp:63,62,61,60,59,58,57,56,
default priority:
Receive buffer size (bytes): 20016,156096,0,0,0,0,0,0,max_buffer_size=262016
Cable len: 7
PFC configuration:
        priority    0   1   2   3   4   5   6   7
        enabled     0   0   0   1   1   0   0   0
        buffer      0   0   0   1   1   0   0   0
tc: 0 ratelimit: unlimited, tsa: ets, bw: 30%
         priority:  0
         priority:  1
tc: 2 ratelimit: unlimited, tsa: ets, bw: 20%
         priority:  2
tc: 3 ratelimit: unlimited, tsa: ets, bw: 50%
         priority:  3
         priority:  4
         priority:  5
tc: 6 ratelimit: unlimited, tsa: strict
         priority:  6
tc: 7 ratelimit: unlimited, tsa: vendor
         priority:  7
"""

# An older mlnx_qos under trust pcp: no dscp2prio, no receive buffer line, no buffer row,
# tabs and tighter spacing, `ratelimit` with a unit.
MLNX_QOS_PCP = """\
DCBX mode: OS controlled
Priority trust state: pcp
Cable len: 7
PFC configuration:
\tpriority    0   1   2   3   4   5   6   7
\tenabled     0   0   0   1   0   0   0   0
tc: 1 ratelimit: unlimited Gbps, tsa: vendor
\t priority:  0
tc: 0 ratelimit: 25.0 Gbps, tsa: vendor
\t priority:  1
tc: 2 ratelimit: unlimited Gbps, tsa: vendor
\t priority:  2
tc: 3 ratelimit: unlimited Gbps, tsa: vendor
\t priority:  3
tc: 4 ratelimit: unlimited Gbps, tsa: vendor
\t priority:  4
tc: 5 ratelimit: unlimited Gbps, tsa: vendor
\t priority:  5
tc: 6 ratelimit: unlimited Gbps, tsa: vendor
\t priority:  6
tc: 7 ratelimit: unlimited Gbps, tsa: vendor
\t priority:  7
"""

SYSFS = """\
/sys/class/net/ens1f0np0/ecn/roce_np/cnp_802p_prio=6
/sys/class/net/ens1f0np0/ecn/roce_np/cnp_dscp=48
/sys/class/net/ens1f0np0/ecn/roce_np/min_time_between_cnps=4
/sys/class/net/ens1f0np0/ecn/roce_rp/dce_tcp_g=1019
/sys/class/net/ens1f0np0/ecn/roce_rp/rpg_ai_rate=5
/sys/class/net/ens1f0np0/ecn/roce_rp/rpg_time_reset=300
/sys/class/net/ens1f0np0/ecn/roce_np/enable/0=0
/sys/class/net/ens1f0np0/ecn/roce_np/enable/3=1
/sys/class/net/ens1f0np0/ecn/roce_rp/enable/0=0
/sys/class/net/ens1f0np0/ecn/roce_rp/enable/3=1
/sys/class/net/ens1f0np0/ecn/roce_rp/enable/5=1
/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos=106
4: ens1f0np0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP mode DEFAULT group default qlen 1000
    link/ether 0c:42:a1:5e:00:01 brd ff:ff:ff:ff:ff:ff
    altname enp59s0f0np0
"""


# --- mlnx_qos -i


def test_mlnx_qos_with_trust_dscp() -> None:
    nic = read_mlnx_qos(MLNX_QOS_DSCP, "h1.txt")
    assert nic.trust == "dscp"
    assert nic.pfc_priorities == {3, 4}
    assert nic.dscp_to_priority[26] == 4 and nic.dscp_to_priority[27] == 3
    assert nic.dscp_to_priority[48] == 6 and nic.dscp_to_priority[0] == 0
    assert nic.buffer_sizes_bytes == (20016, 156096, 0, 0, 0, 0, 0, 0)
    assert nic.priority_to_buffer == (0, 0, 0, 1, 1, 0, 0, 0)
    assert nic.cable_len_m == 7
    assert nic.priority_to_tc == (0, 0, 2, 3, 3, 3, 6, 7)
    assert nic.tsa == {0: "ets", 2: "ets", 3: "ets", 6: "strict", 7: "vendor"}
    assert nic.bw_percent == {0: 30, 2: 20, 3: 50}
    # What the file cannot say stays unknown.
    assert (nic.dcqcn_rp, nic.rp_enabled, nic.roce_tos, nic.mtu_bytes) == (None, None, None, None)
    assert nic.where["trust"] == "h1.txt line 2 (Priority trust state)"
    assert nic.where["dscp_to_priority.26"] == "h1.txt line 8 (dscp2prio prio:4)"
    assert nic.where["pfc_priorities"] == "h1.txt line 17 (PFC configuration enabled)"


def test_older_mlnx_qos_under_trust_pcp() -> None:
    nic = read_mlnx_qos(MLNX_QOS_PCP, "h2.txt")
    assert (nic.trust, nic.pfc_priorities, nic.cable_len_m) == ("pcp", {3}, 7)
    assert nic.priority_to_tc == (1, 0, 2, 3, 4, 5, 6, 7)  # NVIDIA's default: 0 and 1 swapped
    assert set(nic.tsa.values()) == {"vendor"} and nic.bw_percent is None
    assert (nic.dscp_to_priority, nic.buffer_sizes_bytes, nic.priority_to_buffer) == (None, None, None)


def test_a_file_that_is_not_mlnx_qos_output() -> None:
    with pytest.raises(InputError, match="h1.txt: holds no line of `mlnx_qos -i IFACE` output"):
        read_mlnx_qos("Settings for ens1f0np0:\n\tSpeed: 100000Mb/s\n", "h1.txt")


# --- the collection command's output


def test_sysfs_dcqcn_tos_and_mtu() -> None:
    nic = read_nic_sysfs(SYSFS, "h1.sysfs")
    assert nic.dcqcn_np == {"cnp_802p_prio": 6, "cnp_dscp": 48, "min_time_between_cnps": 4}
    assert nic.dcqcn_rp == {"dce_tcp_g": 1019, "rpg_ai_rate": 5, "rpg_time_reset": 300}
    assert (nic.np_enabled, nic.rp_enabled) == ({3}, {3, 5})
    assert (nic.roce_tos, nic.roce_dscp, nic.mtu_bytes) == (106, 26, 9000)  # 106 = 26 << 2 | ECT(0)
    assert nic.trust is None and nic.pfc_priorities is None
    assert nic.where["roce_rp.enable.3"] == "h1.sysfs line 10 (roce_rp/enable/3)"
    assert nic.where["mtu_bytes"] == "h1.sysfs line 13 (ip link ens1f0np0 mtu)"


def test_an_unset_roce_tos_is_zero() -> None:
    # configfs holds no rdma_cm entry for the device until cma_roce_tos makes one: cat finds
    # no file, the command prints nothing after `=`.
    text = SYSFS.replace("default_roce_tos=106", "default_roce_tos=")
    nic = read_nic_sysfs(text, "h1.sysfs")
    assert (nic.roce_tos, nic.roce_dscp) == (0, 0)
    assert nic.where["roce_tos"] == "h1.sysfs line 12 (rdma_cm/mlx5_0 default_roce_tos, not set)"


def test_old_drivers_params_directory_reads_alike() -> None:
    nic = read_nic_sysfs("/sys/class/net/eth2/ecn/roce_rp/params/rpg_hai_rate=50\n", "old.sysfs")
    assert nic.dcqcn_rp == {"rpg_hai_rate": 50} and nic.rp_enabled is None


QOS = (read_mlnx_qos, MLNX_QOS_DSCP, "h1.txt")
SYS = (read_nic_sysfs, SYSFS, "h1.sysfs")


@pytest.mark.parametrize("read,sample,file,edit,expected", [
    pytest.param(*QOS, ("Priority trust state: dscp", "Priority trust state: cos"),
                 "h1.txt: line 2 (Priority trust state): 'cos' is not valid (hint: expected pcp "
                 "or dscp)", id="mlnx_qos-trust"),
    pytest.param(*QOS, ("enabled     0   0   0   1   1   0   0   0",
                        "enabled     0   0   0   1   1   0   0"),
                 "h1.txt: line 17 (PFC configuration enabled): '0   0   0   1   1   0   0' is not "
                 "valid (hint: expected eight 0 or 1 flags)", id="mlnx_qos-pfc-columns"),
    pytest.param(*QOS, ("prio:7 dscp:63,62,61,60,59,58,57,56,",
                        "prio:7 dscp:63,62,61,60,59,58,57,56,48,"),
                 "h1.txt: line 11 (dscp2prio prio:7 dscp): '48' is not valid (hint: expected each "
                 "DSCP once (DSCP 48 is already on priority 6))", id="mlnx_qos-dscp-twice"),
    pytest.param(*QOS, ("prio:3 dscp:31,30,29,28,27,25,24,", "prio:3 dscp:31,30,29,28,27,25,"),
                 "h1.txt: line 3 (dscp2prio mapping): gives no priority for DSCP 24",
                 id="mlnx_qos-dscp-missing"),
    pytest.param(*QOS, ("prio:5 dscp:47,", "prio:5 dscp:47,64,"),
                 "h1.txt: line 9 (dscp2prio prio:5 dscp): '47,64,46,45,44,43,42,41,40,' is not "
                 "valid (hint: expected DSCPs from 0 to 63, comma separated)",
                 id="mlnx_qos-dscp-range"),
    pytest.param(*QOS, ("tsa: strict", "tsa: wrr"),
                 "h1.txt: line 28 (tc: 6 tsa): 'wrr' is not valid (hint: expected strict or ets "
                 "or vendor)", id="mlnx_qos-tsa"),
    pytest.param(*QOS, ("         priority:  7\n", ""),
                 "h1.txt: line 29 (tc: … priority): no TC block lists priority 7",
                 id="mlnx_qos-priority-without-tc"),
    pytest.param(*QOS, ("Cable len: 7", "Cable len: seven"),
                 "h1.txt: line 14 (Cable len): 'seven' is not valid (hint: expected a length in "
                 "metres)", id="mlnx_qos-cable"),
    pytest.param(*SYS, ("cnp_dscp=48", "cnp_dscp="),
                 "h1.sysfs: line 2 (roce_np/cnp_dscp): '' is not valid (hint: expected a whole "
                 "number (cat printed nothing or text))", id="sysfs-empty"),
    pytest.param(*SYS, ("roce_rp/enable/3=1", "roce_rp/enable/3=yes"),
                 "h1.sysfs: line 10 (roce_rp/enable/3): 'yes' is not valid (hint: expected 0 or 1)",
                 id="sysfs-enable-flag"),
    pytest.param(*SYS, ("roce_np/enable/3=1", "roce_np/enable/9=1"),
                 "h1.sysfs: line 8 (roce_np/enable/9): '9' is not valid (hint: expected a "
                 "priority 0 to 7)", id="sysfs-enable-priority"),
    pytest.param(*SYS, ("default_roce_tos=106", "default_roce_tos=300"),
                 "h1.sysfs: line 12 (default_roce_tos): '300' is not valid (hint: expected a ToS "
                 "from 0 to 255)", id="sysfs-tos"),
    pytest.param(*SYS, ("mtu 9000 ", ""), "h1.sysfs: line 13 (ip link mtu)", id="sysfs-no-mtu"),
    pytest.param(*SYS, ("/sys/class/net/ens1f0np0/ecn/roce_np/min_time_between_cnps=4",
                        "cat: /sys/class/net/ens1f0np0/ecn/roce_np/min_time_between_cnps: "
                        "Permission denied"),
                 # the line's first 60 characters
                 "h1.sysfs: line 3: 'cat: /sys/class/net/ens1f0np0/ecn/roce_np/min_time_between_c' "
                 "is not a line of the collection command's output", id="sysfs-stray-line"),
])
def test_errors_name_file_line_and_field(read: Callable[[str, str], HostNicConfig], sample: str,
                                         file: str, edit: tuple[str, str], expected: str) -> None:
    old, new = edit
    assert old in sample
    with pytest.raises(InputError) as info:
        read(sample.replace(old, new, 1), file)
    assert str(info.value).startswith(expected)


def test_every_bad_line_is_reported_at_once() -> None:
    text = SYSFS.replace("cnp_dscp=48", "cnp_dscp=x").replace("rpg_ai_rate=5", "rpg_ai_rate=-5")
    with pytest.raises(InputError) as info:
        read_nic_sysfs(text, "h1.sysfs")
    assert [p.path for p in info.value.problems] == ["line 2 (roce_np/cnp_dscp)",
                                                     "line 5 (roce_rp/rpg_ai_rate)"]


# --- both files, and the RoCE MTU the kernel derives


def test_combine_takes_each_field_from_the_file_that_gives_it() -> None:
    nic = combine(read_mlnx_qos(MLNX_QOS_DSCP, "h1.txt"), read_nic_sysfs(SYSFS, "h1.sysfs"))
    assert (nic.trust, nic.roce_tos, nic.pfc_priorities, nic.np_enabled) == ("dscp", 106, {3, 4}, {3})
    assert nic.where["trust"].startswith("h1.txt") and nic.where["roce_tos"].startswith("h1.sysfs")


@pytest.mark.parametrize("netdev_mtu,roce_mtu", [
    # iboe_get_mtu: the netdev MTU less 96 B (GRH 40, UDP 8, BTH 12, XRC 4, AtomicETH 28,
    # ICRC 4), rounded down to an IB MTU
    (9000, 4096), (4192, 4096), (4191, 2048), (4096, 2048), (1500, 1024), (351, None)])
def test_roce_mtu_from_the_netdev_mtu(netdev_mtu: int, roce_mtu: int | None) -> None:
    assert roce_mtu_for(netdev_mtu) == roce_mtu
