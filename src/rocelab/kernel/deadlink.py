"""A silently dead transmitter: a port whose link stays up while every frame it sends is lost.

An optic or cable that fails this way keeps its carrier, so nothing tells the switch: the
ASIC keeps hashing flows onto the port, and only a protocol that expects to hear from the far
end (BFD, BGP's hold timer) notices. rocelab's switches send their data frames and FRR its
BGP and BFD packets through the same kernel interface, so the failure is made there, below
both: a token-bucket qdisc (sch_tbf, which this machine has where netem and red are missing)
whose bucket is smaller than the smallest Ethernet frame, so every frame given to the port is
dropped and its carrier, addresses and routes are untouched. The far end hears nothing from
the port; the port still hears the far end (a failed transmitter, one direction).
"""

from __future__ import annotations

from pyroute2 import IPRoute

HANDLE = 0xDEAD0000  # "dead:", so that only rocelab's own qdisc is ever removed
TC_H_ROOT = 0xFFFFFFFF
# A bucket smaller than any Ethernet frame (the shortest, an ARP without padding, is 42 bytes):
# tbf drops a frame longer than its bucket whatever the rate.
BUCKET_BYTES = 32
# Any rate that keeps the bucket's time (burst ÷ rate) inside tbf's 32-bit field of ticks and above
# one tick: 1 B/s overflows it, 125 MB/s rounds it to 0 (the kernel refuses both); no frame fits anyway.
RATE_BYTES_PER_S = 8


def kill(netns: str, ifname: str) -> None:
    """Every frame `ifname` sends in `netns` is lost from now on; its link stays up."""
    with IPRoute(netns=netns) as ipr:
        kill_here(ipr, ifname)


def kill_here(ipr: IPRoute, ifname: str) -> None:
    """kill() through a netlink socket already open in the namespace (switchd's, which a case's
    step asks): opening one in another namespace took pyroute2 12 ms here, idle, of a step's
    time on the dilated time line (2.4 µs of it at TDF 5000)."""
    index = ipr.link_lookup(ifname=ifname)[0]
    ipr.tc("replace", "tbf", index, handle=HANDLE, rate=RATE_BYTES_PER_S, burst=BUCKET_BYTES, limit=BUCKET_BYTES)


def on_ports(ipr: IPRoute, qdiscs) -> list[tuple[str, object]]:
    """(interface name, qdisc) for each of `qdiscs`, qdiscs of `ipr`'s namespace."""
    names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
    return [(names[q["index"]], q) for q in qdiscs]


def drops(qdisc) -> int:
    """Packets a qdisc has dropped so far."""
    return qdisc.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["drops"]


def _dead(ipr: IPRoute) -> list[tuple[str, object]]:
    """(interface name, rocelab's qdisc) for every dead transmitter `ipr`'s namespace has."""
    return on_ports(ipr, [q for q in ipr.get_qdiscs() if q["handle"] == HANDLE and q["parent"] == TC_H_ROOT])


def dead(netns: str) -> dict[str, int]:
    """The dead transmitters in `netns`: interface name → frames lost since it died."""
    with IPRoute(netns=netns) as ipr:
        return {name: drops(q) for name, q in _dead(ipr)}


def revive(netns: str) -> list[str]:
    """Every dead transmitter in `netns` sends again; the interfaces revived."""
    with IPRoute(netns=netns) as ipr:
        revived = _dead(ipr)
        for _, q in revived:
            ipr.tc("del", index=q["index"], parent=TC_H_ROOT)
    return [name for name, _ in revived]
