"""BgpConfig → FRR's configuration files, in the shape sonic-bgpcfgd renders them.

SONiC runs FRR in "separated" mode: one file per daemon. bgpd.conf follows docker-fpm-frr's
bgpd.main.conf.j2 (router bgp, its init block, Loopback0 and subnets advertised,
maximum-paths), templates/general/peer-group.conf.j2 and policies.conf.j2 (the PEER_V4 peer
group and its route-maps), templates/general/instance.conf.j2 per BGP_NEIGHBOR and
templates/dynamic/instance.conf.j2 per BGP_PEER_RANGE. Written here, not copied: IPv4 only,
single ASIC, no allow-list, no traffic-shift (docs/routing.md). A Cumulus or EOS configuration
read into the same model renders the same way; its unnumbered sessions as FRR interface neighbors.
"""

from __future__ import annotations

import ipaddress

from rocelab.routing.bgp import CONNECT_RETRY_S, DEFAULT_HOLDTIME_S, DEFAULT_KEEPALIVE_S, Bfd, BgpConfig, Neighbor, PeerRange

PEER_GROUP = "PEER_V4"
# bgpd refuses `maximum-paths` above the ECMP width it was built for: Debian's FRR 8.4 is built
# for 256 (SONiC builds its own for constants.yml's 514). Wider asks are rendered as the most it takes.
FRR_MULTIPATH_NUM = 256
# bgpd starts from bgpd.boot.conf, rendered with `boot=True`: with a coalesce time of 0. Once the
# fabric has first converged, rocelab types FINISH_BOOT into the running bgpd
# (rocelab.engines.frr.finish_config), which from then on runs bgpd.conf's configuration. Why: a
# new update group holds its first advertisement for its coalesce time (FRR's default 1 s of wall
# time), a second per hop that `up` would wait for, for routes that, dilated, arrive within a
# millisecond of emulated time before any traffic flows. (suppress-fib-pending, which holds every
# advertisement a second, cannot wait the same way: FRR 8.4 turned it on in a running bgpd stops
# advertising the routes it had installed before.)
FINISH_BOOT = ("no coalesce-time 0",)


def _header(config: BgpConfig, daemon: str) -> list[str]:
    return [f"! {daemon}.conf rendered by rocelab from {config.source}", "!",
            "frr defaults traditional", f"hostname {config.hostname}", "!"]


def _bfd(subject: str, bfd: Bfd | None) -> list[str]:
    if bfd is None:
        return []
    if bfd.multiplier is None:
        return [f"  neighbor {subject} bfd"]
    return [f"  neighbor {subject} bfd {bfd.multiplier} {bfd.min_rx_ms} {bfd.min_tx_ms}"]


def _neighbor(n: Neighbor) -> list[str]:
    a = n.address
    # An unnumbered session (Cumulus's `neighbor swp51`) is FRR's interface neighbor: bgpd finds the
    # peer's IPv6 link-local address from its router advertisements; where the port has no IPv4
    # address, zebra installs the routes learnt via 169.254.0.1 onlink, a permanent neighbour of
    # the peer's MAC (RFC 5549).
    lines = [f"  neighbor {a} interface remote-as {n.asn}" if n.unnumbered else f"  neighbor {a} remote-as {n.asn}"]
    if n.name:
        lines.append(f"  neighbor {a} description {n.name}")
    if (n.keepalive_s, n.holdtime_s) != (DEFAULT_KEEPALIVE_S, DEFAULT_HOLDTIME_S):
        lines.append(f"  neighbor {a} timers {n.keepalive_s} {n.holdtime_s}")
    lines.append(f"  neighbor {a} timers connect {CONNECT_RETRY_S}")
    if n.shutdown:
        lines.append(f"  neighbor {a} shutdown")
    lines += _bfd(a, n.bfd)
    lines += ["  address-family ipv4", f"    neighbor {a} peer-group {PEER_GROUP}"]
    if n.rrclient:
        lines.append(f"    neighbor {a} route-reflector-client")
    if n.nhopself:
        lines.append(f"    neighbor {a} next-hop-self")
    return lines + [f"    neighbor {a} activate", "  exit-address-family", "!"]


def _peer_range(r: PeerRange) -> list[str]:
    g = r.name
    lines = [f"  neighbor {g} peer-group", f"  neighbor {g} passive", f"  neighbor {g} ebgp-multihop 255",
             f"  neighbor {g} soft-reconfiguration inbound", f"  neighbor {g} route-map FROM_BGP_SPEAKER in",
             f"  neighbor {g} route-map TO_BGP_SPEAKER out", f"  neighbor {g} remote-as {r.asn}"]
    lines += [f"  bgp listen range {prefix} peer-group {g}" for prefix in r.ranges]
    if r.src_address:
        lines.append(f"  neighbor {g} update-source {r.src_address}")
    lines += _bfd(g, r.bfd)
    return lines + ["  address-family ipv4", f"    neighbor {g} activate", "  exit-address-family", "!"]


def render_bgpd(config: BgpConfig, boot: bool = False) -> str:
    """bgpd.conf; with `boot`, the file bgpd starts from (FINISH_BOOT undoes the difference)."""
    lines = _header(config, "bgpd")
    if config.loopback:
        lines += [f"ip prefix-list PL_LoopbackV4 permit {ipaddress.IPv4Interface(config.loopback).network}", "!"]
    # policies.conf.j2: permit everything in and out, through named route-maps a user can edit.
    lines += ["route-map FROM_BGP_PEER_V4 permit 100", "!", "route-map TO_BGP_PEER_V4 permit 100", "!"]
    if config.peer_ranges:
        lines += ["route-map FROM_BGP_SPEAKER permit 100", "!", "route-map TO_BGP_SPEAKER permit 100", "!"]
    lines += [f"router bgp {config.asn}",
              "  bgp log-neighbor-changes",
              # bgpd advertises a route only once zebra has installed it (SONiC: once the ASIC has).
              "  bgp suppress-fib-pending",
              "  no bgp default ipv4-unicast",
              "  no bgp ebgp-requires-policy"] + (["  coalesce-time 0"] if boot else [])
    if config.multipath_relax:
        lines.append("  bgp bestpath as-path multipath-relax")
    if config.router_id:
        lines.append(f"  bgp router-id {config.router_id}")
    lines += [f"  network {prefix}" for prefix in config.networks]
    if config.maximum_paths is not None:
        lines += ["  address-family ipv4", f"    maximum-paths {min(config.maximum_paths, FRR_MULTIPATH_NUM)}",
                  "  exit-address-family", "!"]
    lines += [f"  neighbor {PEER_GROUP} peer-group", "  address-family ipv4",
              f"    neighbor {PEER_GROUP} soft-reconfiguration inbound",
              f"    neighbor {PEER_GROUP} route-map FROM_BGP_PEER_V4 in",
              f"    neighbor {PEER_GROUP} route-map TO_BGP_PEER_V4 out", "  exit-address-family", "!"]
    for neighbor in config.neighbors:
        lines += _neighbor(neighbor)
    for peer_range in config.peer_ranges:
        lines += _peer_range(peer_range)
    return "\n".join(lines + ["exit", "!", ""])


def render_zebra(config: BgpConfig) -> str:
    # SONiC's ASIC learns routes from zebra over FPM with their next hops inline (`no fpm
    # use-next-hop-groups`); switchd learns them from the kernel FIB, so the kernel gets them inline
    # too. With kernel nexthop objects, FRR 8.4 here left a shut-and-restarted uplink out of its
    # ECMP group for good: the kernel dropped the member at link down, zebra believed it installed.
    return "\n".join(_header(config, "zebra") + ["no zebra nexthop kernel enable", "!", ""])


def render_bfdd(config: BgpConfig) -> str:
    # bfdd's sessions come from bgpd's `neighbor … bfd`: its own file only names the router.
    return "\n".join(_header(config, "bfdd") + [""])


def render(config: BgpConfig) -> dict[str, str]:
    """Every daemon's file, by name, and the one bgpd starts from (bgpd.boot.conf: FINISH_BOOT)."""
    return {"zebra.conf": render_zebra(config), "bgpd.conf": render_bgpd(config),
            "bgpd.boot.conf": render_bgpd(config, boot=True), "bfdd.conf": render_bfdd(config)}


def runs_bfd(config: BgpConfig) -> bool:
    return any(n.bfd for n in config.neighbors) or any(r.bfd for r in config.peer_ranges)
