"""What a host node's NIC commands print, from its running NIC (rocelab.qos.nic.HostNicConfig).

Shaped as NVIDIA's tools print them, so that what a user saves on a rocelab host reads back
through the same readers as a real host's files (rocelab.qos.nic): `mlnx_qos -i IFACE`, the
`PATH=VALUE` lines of docs/hosts.md's collection loop, `show_gids`, and perftest's
`ib_write_bw` result block.
"""

from __future__ import annotations

import ipaddress
import statistics

from rocelab.ethernet import PRIORITIES
from rocelab.qos.nic import HostNicConfig

DEVICE = "mlx5_0"  # the RDMA device a ConnectX's first port is; the emulated NIC answers to it
PERFTEST_RULE = "-" * 87


def mlnx_qos(c: HostNicConfig) -> str:
    lines = ["DCBX mode: OS controlled", f"Priority trust state: {c.trust}", "dscp2prio mapping:"]
    for prio in range(PRIORITIES):
        dscps = [d for d in range(len(c.dscp_to_priority) - 1, -1, -1) if c.dscp_to_priority[d] == prio]
        if dscps:
            lines.append(f"\tprio:{prio} dscp:" + "".join(f"{d:02d}," for d in dscps))
    lines += ["PFC configuration:", "\tpriority    " + "".join(f"{p:<4d}" for p in range(PRIORITIES)),
              "\tenabled     " + "".join(f"{int(p in c.pfc_priorities):<4d}" for p in range(PRIORITIES))]
    for tc in range(PRIORITIES):
        members = [p for p in range(PRIORITIES) if c.priority_to_tc[p] == tc]
        bw = f", bw: {c.bw_percent[tc]}%" if c.bw_percent and tc in c.bw_percent else ""
        lines.append(f"tc: {tc} ratelimit: unlimited, tsa: {c.tsa[tc]}{bw}")
        lines += [f"\t priority:  {p}" for p in members]
    return "\n".join(lines)


def sysfs_files(c: HostNicConfig, iface: str, device: str = DEVICE) -> dict[str, str]:
    """Every knob as a path and its value, as the collection loop of docs/hosts.md prints them."""
    files = {}
    for point, values, enabled in (("roce_np", c.dcqcn_np, c.np_enabled), ("roce_rp", c.dcqcn_rp, c.rp_enabled)):
        base = f"/sys/class/net/{iface}/ecn/{point}"
        files.update({f"{base}/{name}": str(value) for name, value in sorted(values.items())})
        files.update({f"{base}/enable/{p}": str(int(p in enabled)) for p in range(PRIORITIES)})
    files[f"/sys/kernel/config/rdma_cm/{device}/ports/1/default_roce_tos"] = str(c.roce_tos)
    return files


# ConnectX's RoCE counters (the mlx5 driver's port hw_counters) for what nicd counts, by nicd's
# name. Only these: a file for something nicd does not do (READs, atomics, ODP) would read 0 for
# the wrong reason.
HW_COUNTERS = {"np_cnp_sent": "cnps_sent", "np_ecn_marked_roce_packets": "ce_received",
               "out_of_sequence": "ooo_received", "packet_seq_err": "naks_received",
               "local_ack_timeout_err": "timeouts", "duplicate_request": "duplicates_received",
               "rnr_nak_retry_err": "rnr_naks_received", "implied_nak_seq_err": "implied_naks"}


def hw_counters(counters: dict, dcqcn: bool, device: str = DEVICE) -> dict[str, str]:
    """The port's hw_counters files (sysfs, read-only) from nicd's `counters`. A CNP received
    is `rp_cnp_handled` where the NIC runs DCQCN (its reaction point acts on it), else
    `rp_cnp_ignored`: `dcqcn` is the NIC's congestion control now, not per QP."""
    base = f"/sys/class/infiniband/{device}/ports/1/hw_counters"
    cnps = counters["cnps_received"]
    files = {name: counters[ours] for name, ours in HW_COUNTERS.items()}
    files |= {"rp_cnp_handled": cnps if dcqcn else 0, "rp_cnp_ignored": 0 if dcqcn else cnps}
    return {f"{base}/{name}": str(value) for name, value in sorted(files.items())}


def ethtool_stats(counters: dict, tdf: int, pfc_priorities: frozenset[int]) -> str:
    """`ethtool -S IFACE` as mlx5 prints it, for what nicd counts: the physical port's packets
    and bytes (every frame, PFC frames included), and per PFC-enabled priority the PFC frames
    received (XOFF and XON; the XONs are the transitions back to sending) and the time paused in
    production-equivalent µs, as the NIC would count it. nicd never sends pause (it has no
    receive buffer to protect): its tx_prio pause counters are 0."""
    pfc = counters["pfc"]
    rows = [("rx_packets_phy", counters["rx_packets"]),
            ("rx_bytes_phy", counters["rx_bytes"]),
            ("tx_packets_phy", counters["tx_packets"]),
            ("tx_bytes_phy", counters["tx_bytes"])]
    for p in sorted(pfc_priorities):
        rows += [(f"rx_prio{p}_pause", pfc["rx_pause_frames"][p] + pfc["rx_xon_frames"][p]),
                 (f"rx_prio{p}_pause_duration", round(pfc["paused_time_s"][p] / tdf * 1e6)),
                 (f"tx_prio{p}_pause", 0), (f"tx_prio{p}_pause_duration", 0),
                 (f"rx_prio{p}_pause_transition", pfc["rx_xon_frames"][p])]
    return "\n".join(["NIC statistics:", *(f"     {name}: {value}" for name, value in rows)])


def ethtool_settings(iface: str, rate_bps: int) -> str:
    """`ethtool IFACE` for the emulated port: its production speed. Its link state is the
    veth's (`ip link`), not printed here."""
    return "\n".join([f"Settings for {iface}:", f"\tSpeed: {rate_bps // 10**6}Mb/s", "\tDuplex: Full",
                      "\tAuto-negotiation: off"])


def show_gids(iface: str, mac: str, address: str, device: str = DEVICE) -> str:
    """The GID table of the emulated port: RoCE v2 only (nicd speaks no v1), its link-local GID
    (EUI-64 of the MAC) and its IPv4 address's."""
    octets = bytes.fromhex(mac.replace(":", ""))
    eui = bytes([octets[0] ^ 2]) + octets[1:3] + b"\xff\xfe" + octets[3:]
    link_local = ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + eui).exploded
    ip = address.split("/")[0]
    mapped = ipaddress.IPv6Address(b"\x00" * 10 + b"\xff\xff" + ipaddress.IPv4Address(ip).packed).exploded
    rows = [("DEV", "PORT", "INDEX", "GID", "IPv4", "VER", "DEV"), ("---", "----", "-----", "---", "------------", "---", "---"),
            (device, "1", "0", link_local, "", "v2", iface), (device, "1", "1", mapped, ip, "v2", iface)]
    widths = [8, 8, 8, 40, 16, 8, 0]
    lines = ["".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines + ["n_gids_found=2"])


def perftest_header(test: str, qps: int, mtu: int, device: str = DEVICE) -> str:
    return "\n".join([PERFTEST_RULE, f"                    {test}",
                      f" Number of qps   : {qps}\t\tTransport type : IB",
                      " Connection type : RC\t\tUsing SRQ      : OFF",
                      f" Device          : {device}", f" Mtu             : {mtu}[B]", " Link type       : Ethernet",
                      " GID index       : 1", " Data ex. method : Ethernet", PERFTEST_RULE])


def perftest_bw(summary: dict, gbits: bool) -> str:
    """perftest's result block (#bytes, #iterations, BW peak, BW average, MsgRate) in
    production-equivalent units, the emulated figures on a line of their own."""
    unit = "Gb/sec" if gbits else "MB/sec"

    def bw(bps: float) -> str:
        return f"{bps / 1e9:.2f}" if gbits else f"{bps / 8 / 2**20:.2f}"

    head = f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"
    row = (f" {summary['message_bytes']:<10d} {summary['messages']:<10d}     {bw(summary['bw_peak_bps']['production']):>12}"
           f"       {bw(summary['bw_average_bps']['production']):>12}\t\t   {summary['msg_rate_pps']['production'] / 1e6:.6f}")
    emulated = (f" emulated at TDF {round(summary['line_rate_bps']['production'] / summary['line_rate_bps']['emulated'])}: "
                f"BW average {summary['bw_average_bps']['emulated'] / 1e6:.2f} Mb/sec, "
                f"{summary['bw_vs_line_rate']:.1%} of line rate")
    return "\n".join([head, row, PERFTEST_RULE, emulated])


def perftest_lat(summary: dict) -> str:
    """perftest's latency block (microseconds, production-equivalent: half a WRITE round trip,
    a whole READ), the emulated typical latency on a line of its own."""
    tdf = summary["tdf"]
    us = [t / tdf * 1e6 for t in summary["latency_s"]]  # sorted
    if not us:
        return " no iteration completed"

    def pct(q: float) -> float:
        return us[min(len(us) - 1, int(q * len(us)))]

    head = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
            "   99% percentile[usec]   99.9% percentile[usec]")
    stdev = statistics.pstdev(us)
    row = (f" {summary['message_bytes']:<6d} {summary['iterations']:<10d}    {us[0]:<14.2f} {us[-1]:<12.2f} "
           f"{statistics.median(us):<18.2f} {statistics.fmean(us):<16.2f} {stdev:<15.2f} {pct(0.99):<22.2f} "
           f"{pct(0.999):.2f}")
    emulated = (f" emulated at TDF {tdf}: t_typical {statistics.median(us) * tdf:.2f} usec; the emulation times "
                f"events to within {summary['resolution_s'] / tdf * 1e6:.2f} usec production-equivalent, so "
                "shorter differences are not resolved; the emulated NIC adds no processing time of its own, and "
                "a frame leaves each hop at the start of its serialization, so a lone frame's size ÷ line rate "
                "per hop is not in these figures")
    return "\n".join([head, row, PERFTEST_RULE, emulated])
