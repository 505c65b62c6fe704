"""Drop reasons and the small helpers every counter-holding object shares.

Every packet the core does not forward is counted under exactly one of these reasons,
at the most specific place it applies: a port (parsing, routing, the link), an ingress
priority group (PG) or an egress queue (STYLE.md rule 8).
"""

from __future__ import annotations

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
