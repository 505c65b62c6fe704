"""What an EOS switch node's commands print, from the profile its running-config reads as
(rocelab.qos.eos) and switchd's counters: `show qos interfaces` and `show priority-flow-control
[counters]`, in EOS's words (EthernetN, Et1 in counter tables, tx-queues highest first).
`names` maps a lab interface (eth1) to the config's interface name (Ethernet1).
"""

from __future__ import annotations

from tabulate import tabulate

from rocelab.qos.model import PortQos, QosProfile
from rocelab.qos.ports import lab_to_sonic

TX_QUEUES = 8


def _short(name: str) -> str:
    return name.replace("Ethernet", "Et", 1)


def _ecn(port: PortQos, queue: int) -> str:
    wred = port.queues.get(queue).wred if queue in port.queues else None
    if wred is None:
        return "Disabled"
    if wred.marks_green:
        return (f"ECN {wred.green_min_threshold_bytes:,}-{wred.green_max_threshold_bytes:,} B, "
                f"{wred.green_drop_probability_pct}%")
    return "WRED" if wred.wred_green_enable else "Disabled"


def qos_interfaces(profile: QosProfile, names: dict[str, str], only: str | None = None) -> str:
    """`show qos interfaces [IFACE]`: trust, default class, and each tx-queue's scheduling and ECN."""
    blocks = []
    for lab, name in sorted(names.items(), key=lambda i: int(i[0][3:])):
        port = profile.ports.get(lab_to_sonic(lab))
        if port is None or (only and only != name):
            continue
        rows = []
        for q in range(TX_QUEUES - 1, -1, -1):
            scheduler = port.queues.get(q).scheduler if q in port.queues else None
            strict = scheduler is not None and scheduler.type == "STRICT"
            weight = "-" if scheduler is None or strict else str(scheduler.weight)
            rows.append([str(q), weight, "-" if not (q in port.queues and port.queues[q].shape_bps) else
                         f"{port.queues[q].shape_bps // 1000:,} kbps", "SP" if strict else "RR", _ecn(port, q)])
        table = tabulate(rows, ["Tx Queue", "Bandwidth (percent)", "Shape Rate", "Priority", "ECN/WRED"],
                         tablefmt="simple", disable_numparse=True)
        trust = "COS" if port.dot1p_to_tc is not None else "DSCP"
        shaping = f"{port.shape_bps // 1000:,} kbps" if port.shape_bps else "disabled"
        blocks.append("\n".join([f"{name}:", f"   Trust Mode: {trust}", "",
                                 f"   Port shaping rate: {shaping}", "",
                                 *("   " + line for line in table.splitlines())]))
    return "\n\n".join(blocks)


def priority_flow_control(profile: QosProfile, names: dict[str, str]) -> str:
    """`show priority-flow-control`: each port's PFC state and no-drop priorities."""
    rows = []
    for lab, name in sorted(names.items(), key=lambda i: int(i[0][3:])):
        port = profile.ports.get(lab_to_sonic(lab))
        pfc = sorted(port.pfc_enable) if port else []
        rows.append([_short(name), "Yes" if pfc else "No", " ".join(map(str, pfc)) or "-",
                     "Yes" if port and port.pfc_wd else "No"])
    return tabulate(rows, ["Port", "Enabled", "No-drop priorities", "Watchdog"], tablefmt="simple",
                    disable_numparse=True)


def pfc_counters(counters: dict, names: dict[str, str], detail: bool) -> str:
    """`show priority-flow-control counters [detail]`: PFC frames received and sent per port, or
    per port and priority."""
    rows = []
    for lab, name in sorted(names.items(), key=lambda i: int(i[0][3:])):
        port = counters["ports"].get(lab)
        if port is None:
            continue
        rx, tx = port["pfc_rx_frames"], port["pfc_tx_frames"]
        if detail:
            rows += [[_short(name), str(p), f"{rx[p]:,}", f"{tx[p]:,}"] for p in range(len(rx))]
        else:
            rows.append([_short(name), f"{sum(rx):,}", f"{sum(tx):,}"])
    headers = ["Port", "Priority", "RxPfc", "TxPfc"] if detail else ["Port", "RxPfc", "TxPfc"]
    return tabulate(rows, headers, tablefmt="simple", disable_numparse=True)
