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
