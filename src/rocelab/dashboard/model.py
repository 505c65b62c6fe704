"""The dashboard's view model: a lab's state and two consecutive readings → one frame.

Pure functions, no I/O: the sampler (rocelab.dashboard.sampler) reads the agents with the
same `runtime.readings.read_lab` that Prometheus scrapes, turns each reading into an Observation
with `timeseries.observe` and hands two of them here; `timeseries.build` gives the
per-interval deltas, rates and paused shares exactly as the run report's series have them.

A frame is plain JSON (what the page draws and the snapshot embeds):

    lab, tdf, t_s (wall seconds since the dashboard started), message ("no lab up", …)
    nodes [{name, role, x, y}], links [{a, b, ab_util, ba_util, ab_bps, ba_bps, ab_share, ba_share}]
        (share: a leaf's uplink's tx over the mean of that leaf's uplinks, the members of its ECMP
        groups; None for any other direction)
    pauses [{port, priority, dir: tx|rx, share, frames, quanta}]
    queues [{port, queue, depth, xoff, kmin, kmax}]
    ecn [{port, queue, marks_per_s}], drops [{port, where, reason, packets, total}]
    qps [{node, qpn, rate_bps, cnps_per_s, retransmitted}], job {…} | None, missing [node]

Rates and "per second" are production-equivalent (emulated × TDF); utilisation is the
share of the link's (dilated) line rate, the same in both time bases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from rocelab.qos.headroom import pg_trigger_bytes
from rocelab.runtime.readings import AgentReading
from rocelab.qos.model import PRIORITIES, QosProfile, port_qos
from rocelab.engines.state import LabState
from rocelab.switch.frames import PFC_XOFF_QUANTA
from rocelab.runtime.timeseries import Observation, build, observe

NO_LAB = "no lab up"
ROLE_ROWS = ("spine", "leaf", "host")  # top to bottom


@dataclass(frozen=True)
class Reading:
    """One poll: emulated seconds since the sampler started, and what each agent said."""

    t_s: float
    agents: tuple[AgentReading, ...]

    @property
    def observation(self) -> Observation:
        return observe(self.agents)


def layout(record: LabState) -> tuple[list[dict], list[dict]]:
    """Nodes placed by role (spines on top, hosts at the bottom) and each link once."""
    def row_of(role: str) -> str:
        return role if role in ROLE_ROWS else "leaf"

    rows: dict[str, list[str]] = {}
    for node in record.nodes:
        rows.setdefault(row_of(node.role), []).append(node.name)
    present = [r for r in ROLE_ROWS if r in rows]  # rows spread over the height, top to bottom
    nodes = []
    for node in record.nodes:
        row = rows[row_of(node.role)]
        level = present.index(row_of(node.role))
        nodes.append({"name": node.name, "role": node.role, "x": (row.index(node.name) + 1) / (len(row) + 1),
                      "y": 1.0 - level / max(1, len(present) - 1)})
    links, seen = [], set()
    for node in record.nodes:
        for iface in node.interfaces:
            a, b = f"{node.name}:{iface.name}", iface.peer
            if b and (b, a) not in seen:
                seen.add((a, b))
                links.append({"a": a, "b": b})
    return nodes, links


def thresholds(profile: QosProfile, port: str) -> dict[int, dict]:
    """Per egress queue of `port`: the WRED/ECN Kmin and Kmax and the xoff trigger of the
    lossless PG of the same priority (bytes; None where the profile sets none)."""
    qos = port_qos(profile, port)
    out = {}
    for q in range(PRIORITIES):
        wred = qos.queues[q].wred if q in qos.queues else None
        lossless = q in qos.pfc_enable and qos.lossless_pg(q)
        out[q] = {"kmin": wred.green_min_threshold_bytes if wred else None,
                  "kmax": wred.green_max_threshold_bytes if wred else None,
                  "xoff": pg_trigger_bytes(profile, qos, q) if lossless else None}
    return out


def _port_counters(agents: Iterable[AgentReading]) -> dict[str, dict]:
    """'leaf1:eth1' → the switch port's counters, for every switch that answered."""
    return {f"{a.node}:{name}": port for a in agents if a.reply is not None and a.agent == "switchd"
            for name, port in a.reply["counters"]["ports"].items()}


def _link_rates(links: list[dict], before: dict[str, dict], now: dict[str, dict], dt_s: float, tdf: int,
                line_rate_bps: Mapping[str, float]) -> list[dict]:
    """Each link's load per direction, read at the switch end (a host-only link has none)."""

    def bps(port: str, key: str) -> float | None:
        if port not in now or port not in before or dt_s <= 0:
            return None
        return max(0, now[port][key] - before[port][key]) * 8 / dt_s

    out = []
    for link in links:
        a, b = link["a"], link["b"]
        ab = bps(a, "tx_bytes") if a in now else bps(b, "rx_bytes")
        ba = bps(b, "tx_bytes") if b in now else bps(a, "rx_bytes")
        rate = line_rate_bps.get(a) or line_rate_bps.get(b)
        out.append({**link,
                    "ab_bps": None if ab is None else ab * tdf, "ba_bps": None if ba is None else ba * tdf,
                    "ab_util": None if ab is None or not rate else min(1.0, ab / rate),
                    "ba_util": None if ba is None or not rate else min(1.0, ba / rate)})
    return out


def uplink_shares(links: list[dict], roles: Mapping[str, str]) -> list[dict]:
    """`links` with `ab_share`/`ba_share`: for a leaf → spine direction, its rate over the mean
    rate of the leaf's uplinks (1: an even spread; N: all on one of N), else None."""
    def up(port: str, peer: str) -> bool:
        return roles.get(port.split(":")[0]) == "leaf" and roles.get(peer.split(":")[0]) == "spine"

    by_leaf: dict[str, list[float]] = {}
    for link in links:
        for port, peer, key in ((link["a"], link["b"], "ab_bps"), (link["b"], link["a"], "ba_bps")):
            if up(port, peer):
                by_leaf.setdefault(port.split(":")[0], []).append(link[key] or 0.0)
    mean = {leaf: sum(rates) / len(rates) for leaf, rates in by_leaf.items()}
    out = []
    for link in links:
        shares = {}
        for port, peer, key in ((link["a"], link["b"], "ab"), (link["b"], link["a"], "ba")):
            leaf_mean = mean.get(port.split(":")[0]) if up(port, peer) else None
            shares[f"{key}_share"] = (link[f"{key}_bps"] or 0.0) / leaf_mean if leaf_mean else None
        out.append({**link, **shares})
    return out


def _nic_ports(record: LabState) -> dict[str, str]:
    """Host → 'h1:eth0', its NIC's port: a NIC's counters carry no port name, its badges belong there."""
    return {n.name: f"{n.name}:{n.interfaces[0].name}" for n in record.nodes if n.role == "host" and n.interfaces}


def _where(labels: dict[str, str], nic_ports: Mapping[str, str]) -> str:
    if "port" in labels:
        return f"{labels['node']}:{labels['port']}"
    return nic_ports.get(labels["node"], labels["node"])


def frame(record: LabState, before: Reading, now: Reading, line_rate_bps: Mapping[str, float],
          queue_marks: Mapping[str, Mapping[int, dict]], totals: Mapping[tuple[str, str, str], int],
          t_s: float, job: dict | None = None) -> dict:
    """The view of the interval between two readings. `queue_marks`: 'leaf1:eth1' → thresholds();
    `totals`: (port, where, reason) → packets dropped since the dashboard started."""
    dt_s = now.t_s - before.t_s
    series = build(record.name, record.tdf, dt_s, [before.t_s, now.t_s], [before.observation, now.observation])
    per_s = record.tdf / dt_s if dt_s > 0 else 0.0
    nodes, links = layout(record)
    pauses, queues, ecn, drops, qps = [], [], [], [], {}
    nic_ports = _nic_ports(record)
    for s in series.series:
        value, labels = s.values[-1], s.labels
        where = _where(labels, nic_ports)
        if s.kind == "paused_fraction" and value > 0:
            pauses.append({"port": where, "priority": int(labels["priority"]), "dir": "rx", "share": value,
                           "frames": 0, "quanta": None})
        elif s.kind == "pfc_tx_frames" and value > 0:
            pauses.append({"port": where, "priority": int(labels["priority"]), "dir": "tx", "share": None,
                           "frames": value, "quanta": PFC_XOFF_QUANTA})
        elif s.kind == "queue_depth_bytes":
            marks = queue_marks.get(where, {}).get(int(labels["queue"]), {})
            queues.append({"port": where, "queue": int(labels["queue"]), "depth": value,
                           "xoff": marks.get("xoff"), "kmin": marks.get("kmin"), "kmax": marks.get("kmax")})
        elif s.kind == "ecn_marked_packets" and value > 0:
            ecn.append({"port": where, "queue": int(labels["queue"]), "marks_per_s": value * per_s})
        elif s.kind == "drops":
            place = labels.get("where", "nic")
            total = totals.get((where, place, labels["reason"]), 0)
            drops.append({"port": where, "where": place, "reason": labels["reason"], "packets": value,
                          "total": total})
        elif s.kind in ("qp_rate_bps", "cnps_received", "retransmitted_packets"):
            qp = qps.setdefault((labels["node"], labels["qpn"]), {"node": labels["node"], "qpn": labels["qpn"],
                                                                   "rate_bps": None, "cnps_per_s": 0.0,
                                                                   "retransmitted": 0})
            if s.kind == "qp_rate_bps":
                qp["rate_bps"] = value * record.tdf
            elif s.kind == "cnps_received":
                qp["cnps_per_s"] = value * per_s
            else:
                qp["retransmitted"] = value
    rx_frames = {(_where(s.labels, nic_ports), int(s.labels["priority"])): s.values[-1]
                 for s in series.of("pfc_rx_frames")}
    for pause in pauses:
        if pause["dir"] == "rx":
            pause["frames"] = rx_frames.get((pause["port"], pause["priority"]), 0)
    # Drops carry on showing (with their totals) after the interval that counted them.
    shown = {(d["port"], d["where"], d["reason"]) for d in drops}
    drops += [{"port": p, "where": w, "reason": r, "packets": 0, "total": n}
              for (p, w, r), n in totals.items() if (p, w, r) not in shown and n]
    return {"lab": record.name, "tdf": record.tdf, "t_s": t_s, "message": None, "nodes": nodes,
            "links": uplink_shares(_link_rates(links, _port_counters(before.agents), _port_counters(now.agents),
                                               dt_s, record.tdf, line_rate_bps), {n.name: n.role for n in record.nodes}),
            "pauses": pauses, "queues": queues, "ecn": ecn,
            "drops": [d for d in drops if d["total"] or d["packets"]], "qps": list(qps.values()), "job": job,
            "missing": sorted(a.node for a in now.agents if a.reply is None)}


def add_drops(totals: dict[tuple[str, str, str], int], f: dict) -> None:
    """Count a frame's drops into the running totals (in place), then show the totals in it."""
    for d in f["drops"]:
        key = (d["port"], d["where"], d["reason"])
        totals[key] = totals.get(key, 0) + int(d["packets"])
        d["total"] = totals[key]


def empty(t_s: float, message: str = NO_LAB, lab: str | None = None) -> dict:
    """The frame while there is nothing to show."""
    return {"lab": lab, "tdf": None, "t_s": t_s, "message": message, "nodes": [], "links": [], "pauses": [],
            "queues": [], "ecn": [], "drops": [], "qps": [], "job": None, "missing": [], "changes": []}


def changes(events: list[dict], t_s: float, now_wall_s: float) -> list[dict]:
    """Changes typed on the lab's nodes (rocelab.nodecli.node's events) on the dashboard's
    clock: an event `now_wall_s - time` seconds ago happened at `t_s` less that."""
    return [{"t_s": round(t_s - (now_wall_s - e["time"]), 3), "node": e["node"], "who": e["who"],
             "command": e["command"], "changed": e["changed"]} for e in events]
