"""What a switch node's SONiC commands print, from switchd's counters and the running config_db.

Plain text as sonic-utilities prints it: tabulate's "simple" tables, SONiC's column names,
SONiC port names (Ethernet0, …), numbers with thousands separators where SONiC's
portstat/queuestat/pfcstat put them, N/A where the emulation has no value. `names` maps a
rocelab interface (eth1) to its SONiC port (Ethernet0): the PORT table's aliases.
"""

from __future__ import annotations

import ipaddress
import re

from tabulate import tabulate

from rocelab.qos.configdb import pfc_priorities, ports
from rocelab.reporting.views import rx_drops
from rocelab.units import format_rate

PRIORITIES = 8


def _table(rows: list[list], headers: list[str]) -> str:
    return tabulate(rows, headers, tablefmt="simple", stralign="right", numalign="right", disable_numparse=True)


def _n(value: int | None) -> str:
    return "N/A" if value is None else f"{value:,}"


def port_names(doc: dict) -> dict[str, str]:
    """rocelab interface → SONiC port, from the PORT table's aliases."""
    return {fields["alias"]: port for port, fields in doc.get("PORT", {}).items() if "alias" in fields}


def _ports(counters: dict, names: dict[str, str], only: str | None = None):
    for lab, port in sorted(counters["ports"].items(), key=lambda i: int(i[0][3:])):
        if only is None or names[lab] == only:
            yield names[lab], port


def interfaces_counters(counters: dict, names: dict[str, str], links: dict, before: dict | None, interval_s: float,
                        rates_bps: dict[str, float], tdf: int) -> str:
    """`show interfaces counters` (portstat): BPS and UTIL production-equivalent (emulated × TDF)."""
    rows = []
    for lab, port in sorted(counters["ports"].items(), key=lambda i: int(i[0][3:])):
        rx_err, rx_drp, tx_drp = rx_drops(port)
        rates = ["N/A"] * 4
        if before is not None:
            old = before["ports"][lab]
            rx = (port["rx_bytes"] - old["rx_bytes"]) * 8 / interval_s
            tx = (port["tx_bytes"] - old["tx_bytes"]) * 8 / interval_s
            rates = [f"{format_rate(rx * tdf)}b/s", f"{100 * rx / rates_bps[lab]:.2f}%",
                     f"{format_rate(tx * tdf)}b/s", f"{100 * tx / rates_bps[lab]:.2f}%"]
        state = "U" if links.get(lab, {}).get("oper", "up") == "up" else "D"
        rows.append([names[lab], state, _n(port["rx_packets"]), rates[0], rates[1], _n(rx_err), _n(rx_drp), "N/A",
                     _n(port["tx_packets"]), rates[2], rates[3], "N/A", _n(tx_drp), "N/A"])
    return _table(rows, ["IFACE", "STATE", "RX_OK", "RX_BPS", "RX_UTIL", "RX_ERR", "RX_DRP", "RX_OVR",
                         "TX_OK", "TX_BPS", "TX_UTIL", "TX_ERR", "TX_DRP", "TX_OVR"])


def _speed(mbps: str) -> str:
    value = int(mbps)
    return f"{value // 1000}G" if value % 1000 == 0 else f"{value}M"


def interfaces_status(doc: dict, links: dict) -> str:
    """`show interfaces status`: Oper from the kernel's link (carrier), Admin from config_db."""
    by_port = {port: lab for lab, port in port_names(doc).items()}
    rows = []
    for port in ports(doc):
        fields = doc["PORT"][port]
        link = links.get(by_port.get(port, ""), {})
        rows.append([port, fields.get("lanes", "N/A"), _speed(fields["speed"]) if "speed" in fields else "N/A",
                     fields.get("mtu", "9100"), fields.get("fec", "N/A"), fields.get("alias", "N/A"), "routed",
                     link.get("oper", "down"), fields.get("admin_status", "down"), "N/A", fields.get("pfc_asym", "off")])
    return _table(rows, ["Interface", "Lanes", "Speed", "MTU", "FEC", "Alias", "Vlan", "Oper", "Admin", "Type",
                         "Asym PFC"])


def queue_counters(counters: dict, names: dict[str, str], only: str | None = None) -> str:
    """`show queue counters [IFACE]` (queuestat): unicast queues UC0-UC7, drops of every reason."""
    rows = []
    for port, counts in _ports(counters, names, only):
        for index, q in enumerate(counts["queues"]):
            dropped = q["drops"].values()
            rows.append([port, f"UC{index}", _n(q["tx_packets"]), _n(q["tx_bytes"]),
                         _n(sum(d["packets"] for d in dropped)), _n(sum(d["bytes"] for d in dropped))])
    return _table(rows, ["Port", "TxQ", "Counter/pkts", "Counter/bytes", "Drop/pkts", "Drop/bytes"])


def queue_wred_counters(counters: dict, names: dict[str, str], only: str | None = None) -> str:
    """`show queue wredcounters [IFACE]`: WRED drops and ECN marks per queue."""
    rows = []
    for port, counts in _ports(counters, names, only):
        for index, q in enumerate(counts["queues"]):
            wred = q["drops"].get("wred_drop", {"packets": 0, "bytes": 0})
            rows.append([port, f"UC{index}", _n(wred["packets"]), _n(wred["bytes"]),
                         _n(q["ecn_marked_packets"]), _n(q["ecn_marked_bytes"])])
    return _table(rows, ["Port", "TxQ", "WredDrp/pkts", "WredDrp/bytes", "EcnMarked/pkts", "EcnMarked/bytes"])


def pfc_counters(counters: dict, names: dict[str, str]) -> str:
    """`show pfc counters` (pfcstat): frames received, then sent, per priority."""
    out = []
    for direction, field in (("Rx", "pfc_rx_frames"), ("Tx", "pfc_tx_frames")):
        rows = [[port, *(_n(v) for v in counts[field])] for port, counts in _ports(counters, names)]
        out.append(_table(rows, [f"Port {direction}", *(f"PFC{p}" for p in range(PRIORITIES))]))
    return "\n\n".join(out)


def pfc_priority(doc: dict) -> str:
    """`show pfc priority`: each port's lossless priorities (PORT_QOS_MAP pfc_enable)."""
    rows = [[port, ",".join(map(str, pfc_priorities(doc, port))) or "N/A"] for port in ports(doc)]
    return tabulate(rows, ["Interface", "Lossless priorities"], tablefmt="simple")


def pg_watermark(counters: dict, names: dict[str, str], kind: str) -> str:
    """`show priority-group watermark shared|headroom`."""
    field, title = {"shared": ("shared_watermark_bytes", "Ingress shared pool occupancy per PG:"),
                    "headroom": ("headroom_watermark_bytes", "Ingress headroom per PG:")}[kind]
    rows = [[port, *(_n(pg[field]) for pg in counts["pgs"])] for port, counts in _ports(counters, names)]
    return f"{title}\n{_table(rows, ['Port', *(f'PG{p}' for p in range(PRIORITIES))])}"


def queue_watermark(counters: dict, names: dict[str, str]) -> str:
    """`show queue watermark unicast`."""
    rows = [[port, *(_n(q["shared_watermark_bytes"]) for q in counts["queues"])]
            for port, counts in _ports(counters, names)]
    return "Egress shared pool occupancy per unicast queue:\n" + \
        _table(rows, ["Port", *(f"UC{q}" for q in range(PRIORITIES))])


def pfcwd_config(doc: dict) -> str:
    """`show pfcwd config`."""
    wd = doc.get("PFC_WD", {})
    rows = [[port, wd[port].get("action", "drop"), wd[port].get("detection_time", "N/A"),
             wd[port].get("restoration_time", "N/A")] for port in ports(doc) if port in wd]
    poll = wd.get("GLOBAL", {}).get("POLL_INTERVAL")
    head = f"Changed polling interval to {poll}ms\n" if poll else ""
    return head + _table(rows, ["PORT", "ACTION", "DETECTION TIME", "RESTORATION TIME"])


def pfcwd_stats(counters: dict, names: dict[str, str], doc: dict) -> str:
    """`show pfcwd stats`: every lossless queue the watchdog watches, stormed or operational."""
    rows = []
    for port, counts in _ports(counters, names):
        watched = set(pfc_priorities(doc, port)) if port in doc.get("PFC_WD", {}) else set()
        for index, q in enumerate(counts["queues"]):
            wd = q["pfcwd"]
            if wd is None or index not in watched:
                continue
            dropped = q["drops"].get("pfcwd_drop", {"packets": 0})["packets"]
            rows.append([f"{port}:{index}", "stormed" if wd["stormed"] else "operational",
                         f"{wd['storms_detected']}/{wd['storms_restored']}", f"{q['tx_packets']}/{dropped}",
                         "N/A", "N/A", "N/A"])
    return _table(rows, ["QUEUE", "STATUS", "STORM DETECTED/RESTORED", "TX OK/DROP", "RX OK/DROP",
                         "TX LAST OK/DROP", "RX LAST OK/DROP"])


def ecn_list(doc: dict) -> str:
    """`ecnconfig -l`: every WRED_PROFILE, field by field."""
    out = []
    for name, fields in doc.get("WRED_PROFILE", {}).items():
        rows = [[field, value] for field, value in fields.items()]
        out.append(f"Profile: {name}\n{tabulate(rows, tablefmt='simple', disable_numparse=True)}")
    return "\n".join(out)


FRR_CODES = """Codes: K - kernel route, C - connected, S - static, R - RIP,
       O - OSPF, I - IS-IS, B - BGP, E - EIGRP, N - NHRP,
       T - Table, v - VNC, V - VNC-Direct, A - Babel, F - PBR,
       f - OpenFabric,
       > - selected route, * - FIB route, q - queued, r - rejected, b - backup
       t - trapped, o - offload failure
"""
RTPROT_KERNEL = 2  # a connected subnet's route, the kernel's own
PORT_NAME = re.compile(r"\beth\d+\b")


def ip_route(fib: dict, names: dict[str, str], only: str | None = None) -> str:
    """`show ip route [A.B.C.D[/M]]` where no FRR runs: the kernel's routes (switchd's `fib` op,
    "kernel") as FRR's zebra would list them, rocelab's static routes as kernel routes (K) and
    each port's subnet as connected (C); a route switchd has not programmed yet (the ASIC's
    FIB programming time) is queued (q), not in the FIB (*). `only`: FRR's entry for that
    prefix, or for the longest one holding that address."""
    if only is not None:
        return "\n".join(_route_entry(route, fib, names) for route in _matching(fib["kernel"], only)) \
            or "% Network not in table"
    lines = [FRR_CODES]
    for prefix, protocol, hops in fib["kernel"]:
        if _connected(protocol, hops):
            lines.append(f"C>* {prefix} is directly connected, {names.get(hops[0][0], hops[0][0])}")
            continue
        mark = _fib_mark(fib, prefix, hops)
        lead = f"K>{mark} {prefix} [0/0] "
        for i, (port, gateway) in enumerate(hops):
            start = lead if i == 0 else f"  {mark}".ljust(len(lead))
            lines.append(f"{start}via {gateway}, {names.get(port, port)}")
    return "\n".join(lines)


def _connected(protocol: int, hops: list) -> bool:
    return protocol == RTPROT_KERNEL and not any(gateway for _, gateway in hops)


def _fib_mark(fib: dict, prefix: str, hops: list) -> str:
    """FRR's `*` where switchd forwards on the route as the kernel holds it, `q` where not yet."""
    return "*" if sorted(p for p, _ in fib["routes"].get(prefix, [])) == sorted(p for p, _ in hops) else "q"


def _route_entry(route: list, fib: dict, names: dict[str, str]) -> str:
    prefix, protocol, hops = route
    if _connected(protocol, hops):
        return (f"Routing entry for {prefix}\n  Known via \"connected\", distance 0, metric 0, best\n"
                f"  * directly connected, {names.get(hops[0][0], hops[0][0])}\n")
    mark = _fib_mark(fib, prefix, hops)
    legs = "".join(f"  {mark} {gateway}, via {names.get(port, port)}\n" for port, gateway in hops)
    return f"Routing entry for {prefix}\n  Known via \"kernel\", distance 0, metric 0, best\n{legs}"


def _matching(routes: list[list], only: str) -> list[list]:
    if "/" in only:
        wanted = ipaddress.ip_network(only, strict=False)
        return [r for r in routes if ipaddress.ip_network(r[0]) == wanted]
    address = ipaddress.ip_address(only)
    holding = [r for r in routes if address in ipaddress.ip_network(r[0])]
    return [max(holding, key=lambda r: ipaddress.ip_network(r[0]).prefixlen)] if holding else []


def sonic_names(text: str, names: dict[str, str]) -> str:
    """FRR's output with SONiC's names for the ports (eth3 → Ethernet8), as a SONiC switch's
    kernel names them."""
    return PORT_NAME.sub(lambda m: names.get(m.group(0), m.group(0)), text)
