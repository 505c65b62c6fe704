"""Drop reasons and the small helpers every counter-holding object shares.

Every packet the core does not forward is counted under exactly one of these reasons,
at the most specific place it applies: a port (parsing, routing, the link), an ingress
priority group (PG) or an egress queue (STYLE.md rule 8).
"""

from __future__ import annotations

from rocelab.ethernet import PRIORITIES

# Port: the frame never reached a PG or queue, or was lost on the link.
TRUNCATED = "truncated"  # shorter than its headers or its IPv4 total length
OVERSIZED = "oversized"  # longer than MAX_FRAME_BYTES
NOT_IPV4 = "not_ipv4"  # another EtherType (ARP, IPv6, LLDP …): the kernel's business
NOT_FOR_US = "not_for_us"  # unicast to another MAC: a router drops it
BAD_IPV4_HEADER = "bad_ipv4_header"  # version ≠ 4 or IHL < 5
BAD_IPV4_CHECKSUM = "bad_ipv4_checksum"
MAC_CONTROL_UNSUPPORTED = "mac_control_unsupported"  # MAC Control other than PFC and PAUSE
# 802.3x PAUSE on a port whose global flow control is off (SAI's default, SONiC's only
# setting): the MAC counts it (pause_rx_frames) and discards it.
FLOW_CONTROL_DISABLED = "flow_control_disabled"
TTL_EXPIRED = "ttl_expired"
NO_ROUTE = "no_route"
TO_SELF = "to_self"  # addressed to one of the switch's own addresses
IMPAIRMENT_LOSS = "impairment_loss"  # random loss configured on the egress link
# PG
HEADROOM_EXCEEDED = "headroom_exceeded"  # lossless PG past its trigger plus headroom
# PG (lossy traffic over the PG's limit) or queue (lossy queue over its limit)
TAIL_DROP = "tail_drop"
# Queue
WRED_DROP = "wred_drop"
PFCWD_DROP = "pfcwd_drop"  # the PFC watchdog found the queue stormed, action drop
# Every reason above, as the C core's names are checked against it.
DROP_REASONS = frozenset(v for k, v in tuple(globals().items()) if k.isupper() and isinstance(v, str))


def count_drop(drops: dict[str, list[int]], reason: str, size_bytes: int) -> None:
    """Add one packet of `size_bytes` to `drops[reason]` = [packets, bytes]."""
    entry = drops.get(reason)
    if entry is None:
        drops[reason] = [1, size_bytes]
    else:
        entry[0] += 1
        entry[1] += size_bytes


def drops_json(drops: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    return {reason: {"packets": n, "bytes": b} for reason, (n, b) in sorted(drops.items())}


# Counters travel packed: one flat list of numbers per switch in this order, per port, then
# the drops as [holder, reason, packets, bytes]. The C core fills the list straight from its
# state and JSON encodes it in microseconds, where the nested view took a switchd 1-4 ms of
# its loop per request (20 a second while a case samples). Readers call `expand`.
PORT_VALUES = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "pause_rx_frames")
PORT_LISTS = ("pfc_rx_frames", "pfc_tx_frames", "paused_time_s")  # PRIORITIES values each
QUEUE_VALUES = ("tx_packets", "tx_bytes", "ecn_marked_packets", "ecn_marked_bytes", "depth_bytes",
                "watermark_bytes", "shared_watermark_bytes", "pfcwd", "stormed", "storms_detected",
                "storms_restored")  # pfcwd: 1 where the queue has a watchdog, then its three
PG_VALUES = ("rx_packets", "rx_bytes", "lossless", "xoff", "reserved_bytes", "shared_bytes", "headroom_bytes",
             "shared_watermark_bytes", "headroom_watermark_bytes", "held_packets", "held_bytes")
HOLDERS_PER_PORT = 1 + 2 * PRIORITIES  # drops' holder: port index × this + 0 (the port), 1 + queue, 1 + 8 + PG
PORT_STRIDE = len(PORT_VALUES) + len(PORT_LISTS) * PRIORITIES + PRIORITIES * (len(QUEUE_VALUES) + len(PG_VALUES))


def pack(switch: str, now: float, ports: list[str], values: list, drops: list) -> dict:
    return {"switch": switch, "time_s": now, "ports": ports, "values": values, "drops": drops}


def expand(packed: dict) -> dict:
    """The nested view every reader uses (layout: the `rocelab.switch` docstring)."""
    values, names = packed["values"], packed["ports"]
    if len(values) != PORT_STRIDE * len(names):
        raise ValueError(f"packed counters of {packed['switch']}: {len(values)} values for {len(names)} ports, "
                         f"expected {PORT_STRIDE} a port")
    holders: list[dict[str, list[int]]] = [{} for _ in range(HOLDERS_PER_PORT * len(names))]
    totals: dict[str, list[int]] = {}
    for holder, reason, n, b in packed["drops"]:
        holders[holder][reason] = [n, b]
        entry = totals.setdefault(reason, [0, 0])
        entry[0] += n
        entry[1] += b
    ports = {}
    at = 0
    for index, name in enumerate(names):
        port = dict(zip(PORT_VALUES, values[at:at + len(PORT_VALUES)]))
        at += len(PORT_VALUES)
        base = index * HOLDERS_PER_PORT
        port["drops"] = drops_json(holders[base])
        for key in PORT_LISTS:
            port[key] = values[at:at + PRIORITIES]
            at += PRIORITIES
        queues = []
        for q in range(PRIORITIES):
            v = dict(zip(QUEUE_VALUES, values[at:at + len(QUEUE_VALUES)]))
            at += len(QUEUE_VALUES)
            queues.append({**{k: v[k] for k in QUEUE_VALUES[:7]}, "drops": drops_json(holders[base + 1 + q]),
                           "pfcwd": {"stormed": bool(v["stormed"]), "storms_detected": v["storms_detected"],
                                     "storms_restored": v["storms_restored"]} if v["pfcwd"] else None})
        pgs = []
        for g in range(PRIORITIES):
            v = dict(zip(PG_VALUES, values[at:at + len(PG_VALUES)]))
            at += len(PG_VALUES)
            pgs.append({**v, "lossless": bool(v["lossless"]), "xoff": bool(v["xoff"]),
                        "drops": drops_json(holders[base + 1 + PRIORITIES + g])})
        ports[name] = {**port, "queues": queues, "pgs": pgs}
    return {"switch": packed["switch"], "time_s": packed["time_s"], "drops": drops_json(totals), "ports": ports}


# Counter fields that describe the moment (occupancy, state) rather than count since a
# clear: a new pipeline's value is the only true one.
_GAUGES = frozenset({"depth_bytes", "reserved_bytes", "shared_bytes", "headroom_bytes", "lossless", "xoff",
                     "stormed", "switch", "time_s"})


def carry_counters(before: dict | None, now: dict) -> dict:
    """`now` (a new pipeline's counters, `Switch.counters` layout) continued from `before`
    (what the pipeline it replaced had counted): counts add, watermarks keep the higher,
    gauges are `now`'s. A profile change on a running switch keeps what `show` counted."""
    if before is None:
        return now
    return _carry(before, now, "")


def _carry(before, now, key: str):
    if isinstance(now, dict) and isinstance(before, dict):
        return {k: _carry(before.get(k), v, k) if k in before else v for k, v in now.items()} | \
            {k: v for k, v in before.items() if k not in now and k not in _GAUGES}
    if isinstance(now, list) and isinstance(before, list) and len(now) == len(before):
        return [_carry(b, n, key) for b, n in zip(before, now)]
    if key in _GAUGES or isinstance(now, bool) or not isinstance(now, (int, float)) \
            or not isinstance(before, (int, float)):
        return now
    return max(before, now) if "watermark" in key else before + now


def counters_since(cleared: dict | None, now: dict) -> dict:
    """`now` less what `cleared` (a snapshot, as `sonic-clear` saves one) had counted: counts
    subtract; gauges and watermarks are `now`'s. A count below its snapshot means the agent
    itself was cleared since, and `now` is already the count since then."""
    if cleared is None:
        return now
    return _since(cleared, now, "")


def _since(before, now, key: str):
    if isinstance(now, dict) and isinstance(before, dict):
        return {k: _since(before.get(k), v, k) for k, v in now.items()}
    if isinstance(now, list) and isinstance(before, list) and len(now) == len(before):
        return [_since(b, n, key) for b, n in zip(before, now)]
    if key in _GAUGES or "watermark" in key or isinstance(now, bool) or not isinstance(now, (int, float)) \
            or not isinstance(before, (int, float)) or now < before:
        return now
    return now - before
