"""switchd's netlink reader (rocelab.kernel.rtnl) and the FIB it builds (rocelab.switch.kernel_fib)
on a real namespace: the dumps agree with iproute2's own (`ip -j`), the FIB holds exactly the
main table's unicast routes whose next hops have a neighbour, a lost carrier is a down port,
and a route change wakes the event socket."""

from __future__ import annotations

import json
import os
import select
import subprocess

import pytest

from rocelab.kernel.netns import in_netns
from rocelab.kernel.rtnl import Events, Rtnl
from rocelab.switch import Fib, NextHop
from rocelab.switch.kernel_fib import down_ports, read_fib

pytestmark = pytest.mark.root
MACS = [f"02:52:4c:00:0b:0{i}" for i in range(3)]
PORTS = ["e0", "e1", "e2"]
UNNUMBERED_MACS = ["02:52:4c:00:0c:00", "02:52:4c:00:0c:01"]


def ip(ns: str, *args: str) -> str:
    return subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def ns():
    """Three veth pairs (e0-p0 …), a /31 and a permanent neighbour on each eN, and routes of
    every kind the reader must keep or leave out."""
    name = f"trtnl{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        ip(name, "link", "set", "lo", "up")
        for i, mac in enumerate(MACS):
            ip(name, "link", "add", f"e{i}", "type", "veth", "peer", "name", f"p{i}")
            for dev in (f"e{i}", f"p{i}"):
                ip(name, "link", "set", dev, "up")
            ip(name, "addr", "add", f"198.18.{i}.0/31", "dev", f"e{i}")
            ip(name, "neigh", "replace", f"198.18.{i}.1", "lladdr", mac, "dev", f"e{i}", "nud", "permanent")
        ip(name, "route", "add", "198.19.1.0/24", "nexthop", "via", "198.18.0.1", "nexthop", "via", "198.18.1.1")
        ip(name, "route", "add", "198.19.2.0/24", "via", "198.18.2.1")
        ip(name, "route", "add", "198.19.3.0/24", "via", "198.18.2.1", "table", "100")  # not the main table
        ip(name, "route", "add", "blackhole", "198.19.4.0/24")  # not unicast
        ip(name, "addr", "add", "198.18.9.0/31", "dev", "p2")  # on a port the switch does not have
        ip(name, "neigh", "replace", "198.18.9.1", "lladdr", "02:52:4c:00:0b:09", "dev", "p2", "nud", "permanent")
        ip(name, "route", "add", "198.19.5.0/24", "nexthop", "via", "198.18.9.1", "nexthop", "via", "198.18.2.1")
        # What zebra installs for routes learnt over unnumbered sessions (RFC 5549): one gateway,
        # 169.254.0.1 onlink, a permanent neighbour of a different MAC on each port.
        for i, mac in enumerate(UNNUMBERED_MACS):
            ip(name, "neigh", "replace", "169.254.0.1", "lladdr", mac, "dev", f"e{i}", "nud", "permanent")
        ip(name, "route", "add", "198.19.7.0/24", "nexthop", "via", "169.254.0.1", "dev", "e0", "onlink",
           "nexthop", "via", "169.254.0.1", "dev", "e1", "onlink")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def rtnl(ns):
    """A dump socket opened in the fixture's namespace."""
    with in_netns(ns):
        sock = Rtnl()
    yield sock
    sock.close()


def test_the_dumps_agree_with_iproute2(ns, rtnl):
    links = rtnl.links()
    kernel_links = json.loads(ip(ns, "-j", "link", "show"))
    assert {(link.index, link.name, link.up, link.admin_up, link.mtu) for link in links} == {
        (link["ifindex"], link["ifname"], link["operstate"] == "UP", "UP" in link["flags"], link["mtu"])
        for link in kernel_links}
    index = {link["ifname"]: link["ifindex"] for link in kernel_links}
    assert sorted(rtnl.neighbours()) == sorted(
        (index[n["dev"]], n["dst"], n["lladdr"]) for n in json.loads(ip(ns, "-j", "-4", "neigh", "show")))
    assert sorted(rtnl.addresses()) == sorted(
        (link["ifindex"], a["local"]) for link in json.loads(ip(ns, "-j", "-4", "addr", "show"))
        for a in link["addr_info"])
    main = {r.dst: r for r in rtnl.routes() if r.table == 254}
    for route in json.loads(ip(ns, "-j", "-4", "route", "show", "table", "main")):
        dst = route["dst"] if "/" in route["dst"] else f"{route['dst']}/32"
        dst = "0.0.0.0/0" if route["dst"] == "default" else dst
        legs = route.get("nexthops") or [route]
        assert sorted(main[dst].hops, key=str) == sorted(
            ((index.get(leg.get("dev"), 0), leg.get("gateway")) for leg in legs), key=str), dst
    assert {r.dst for r in rtnl.routes() if r.table == 100} == {"198.19.3.0/24"}


def test_the_fib_holds_the_main_tables_unicast_routes_through_the_ports_with_their_neighbours(ns, rtnl):
    fib = read_fib(rtnl, PORTS, rtnl.links())
    hop = [NextHop(port, mac) for port, mac in zip(PORTS, MACS)]
    assert fib == Fib({"198.18.0.1/32": [hop[0]], "198.18.1.1/32": [hop[1]], "198.18.2.1/32": [hop[2]],
                       "198.19.1.0/24": [hop[0], hop[1]], "198.19.2.0/24": [hop[2]],
                       "198.19.5.0/24": [hop[2]],  # the leg through p2 is not a port of the switch
                       # each leg to its own port's peer; 169.254.0.1 itself is no host
                       "198.19.7.0/24": [NextHop("e0", UNNUMBERED_MACS[0]), NextHop("e1", UNNUMBERED_MACS[1])]},
                      frozenset({"198.18.0.0", "198.18.1.0", "198.18.2.0"}))
    assert down_ports(rtnl.links(), PORTS) == frozenset()
    ip(ns, "link", "set", "p1", "down")  # e1's carrier lost: its far end went down
    ip(ns, "link", "set", "e2", "down")  # e2 shut
    assert down_ports(rtnl.links(), PORTS) == {"e1", "e2"}
    assert [(link.admin_up, link.up) for link in rtnl.links() if link.name in PORTS] == [
        (True, True), (True, False), (False, False)]


def test_a_route_change_wakes_the_event_socket_and_draining_quiets_it(ns):
    with in_netns(ns):
        events = Events()
    try:
        events.drain()
        assert select.select([events], [], [], 0.2)[0] == []
        ip(ns, "route", "add", "198.19.6.0/24", "via", "198.18.0.1")
        assert select.select([events], [], [], 2.0)[0] == [events]
        events.drain()
        assert select.select([events], [], [], 0.2)[0] == []
    finally:
        events.close()
