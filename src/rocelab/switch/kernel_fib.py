"""The switch's forwarding table as its namespace's kernel holds it, read over netlink.

As in SONiC, the control plane and the data plane meet at the kernel FIB: whatever fills
the routing table (rocelab's static ECMP routes, FRR) is read here and compiled by
switchd. Connected subnets become one /32 per neighbour entry, since the emulated ASIC
forwards to a next-hop MAC and does no ARP. Runs inside the switch's namespace. The FIB is
read with rocelab.kernel.rtnl (struct over a netlink socket: it is read at every change, in
switchd's loop); a shut port's state is kept and put back with pyroute2.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pyroute2 import IPRoute

from rocelab.kernel.rtnl import Link, Rtnl
from rocelab.switch.fib import Fib, NextHop

MAIN_TABLE = 254
NUD_PERMANENT = 0x80
RTN_UNICAST = 1
# rtnetlink.h: protocols above RTPROT_STATIC are routing daemons' (zebra marks BGP's 186), which
# withdraw and reinstall their own routes; only those below are an administrator's, or rocelab's.
RTPROT_STATIC = 4
AF_INET = 2
LINK_LOCAL_V4 = "169.254."


def read_fib(rtnl: Rtnl, ports: list[str], links: list[Link]) -> Fib:
    """The FIB of the namespace `rtnl` was opened in, over these ports; `links` its links, as
    just dumped (they also say which ports are down: down_ports)."""
    ifname = {link.index: link.name for link in links}
    neighbours: dict[tuple[str, str], str] = {}  # (port, ip) → mac
    for ifindex, ip, mac in rtnl.neighbours():
        port = ifname.get(ifindex)
        if port in ports:
            neighbours[(port, ip)] = mac
    local = frozenset(ip for index, ip in rtnl.addresses() if ifname.get(index) in ports)

    routes: dict[str, list[NextHop]] = {}
    for (port, ip), mac in neighbours.items():
        # 169.254.0.1 is zebra's stand-in gateway for routes learnt over an unnumbered session,
        # one permanent neighbour per port: a next hop, never a host.
        if not ip.startswith(LINK_LOCAL_V4):
            routes[f"{ip}/32"] = [NextHop(port, mac)]
    for route in rtnl.routes():
        if route.table != MAIN_TABLE or route.type != RTN_UNICAST:
            continue
        hops = []
        for oif, gateway in route.hops:
            mac = neighbours.get((ifname.get(oif), gateway)) if gateway else None
            if mac:
                hops.append(NextHop(ifname[oif], mac))
        if hops:  # a connected route has no gateway: its /32s above carry it
            routes[route.dst] = hops
    return Fib(routes, local)


def kernel_routes(rtnl: Rtnl, ports: list[str], links: list[Link]) -> list[list]:
    """The main table's unicast routes through these ports, as `show ip route` lists them:
    [prefix, protocol (RTPROT_*), [[port, gateway or None], …]], by prefix."""
    ifname = {link.index: link.name for link in links}
    found = []
    for route in rtnl.routes():
        hops = [[ifname[oif], gateway] for oif, gateway in route.hops if ifname.get(oif) in ports]
        if route.table == MAIN_TABLE and route.type == RTN_UNICAST and hops:
            found.append([route.dst, route.protocol, hops])
    return sorted(found, key=lambda r: ipaddress.ip_network(r[0]))


def down_ports(links: list[Link], ports: list[str]) -> frozenset[str]:
    """The ports whose link is not up (shut here, or the far end's carrier lost)."""
    return frozenset(link.name for link in links if link.name in ports and not link.up)


def shut_ports(links: list[Link], ports: list[str]) -> frozenset[str]:
    """The ports shut here (admin down)."""
    return frozenset(link.name for link in links if link.name in ports and not link.admin_up)


@dataclass(frozen=True)
class PortState:
    """What the kernel forgets when a port is set down: its static neighbours (the engine's,
    rocelab's stand-in for ARP, which switchd does not answer) and the single-path static routes
    through it (not a routing daemon's: FRR puts its own back)."""

    neighbours: tuple[tuple[str, str], ...]  # (address, MAC)
    routes: tuple[tuple[str, str], ...]  # (prefix, gateway)


def port_state(ipr: IPRoute, index: int) -> PortState:
    neighbours = tuple((n.get_attr("NDA_DST"), n.get_attr("NDA_LLADDR")) for n in ipr.get_neighbours(family=AF_INET)
                       if n["ifindex"] == index and n["state"] & NUD_PERMANENT and n.get_attr("NDA_LLADDR"))
    routes = tuple((f"{r.get_attr('RTA_DST') or '0.0.0.0'}/{r['dst_len']}", r.get_attr("RTA_GATEWAY"))
                   for r in ipr.get_routes(family=AF_INET, table=MAIN_TABLE)
                   if r["type"] == RTN_UNICAST and r.get_attr("RTA_OIF") == index and r.get_attr("RTA_GATEWAY")
                   and r["proto"] <= RTPROT_STATIC)
    return PortState(neighbours, routes)


def restore_port_state(ipr: IPRoute, index: int, state: PortState) -> None:
    """A port set up again: its neighbours and routes back, as the engine made them."""
    for address, mac in state.neighbours:
        ipr.neigh("replace", dst=address, lladdr=mac, ifindex=index, state=NUD_PERMANENT)
    for prefix, gateway in state.routes:
        ipr.route("replace", dst=prefix, gateway=gateway, oif=index)
