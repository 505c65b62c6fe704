"""switchd's CPU port: TTL-expired packets answered with ICMP time exceeded; and its start:
listening for route changes before the first FIB dump."""

from __future__ import annotations

import pytest
from scapy.layers.inet import ICMP, IP, UDP, IPerror, UDPerror
from scapy.layers.l2 import Ether

from rocelab.ethernet import mac_bytes
from rocelab.switch.agent import icmp_time_exceeded

PORT_MAC = "02:52:4c:00:03:01"
PORT_IP = bytes([198, 19, 1, 1])


def test_ttl_expired_packet_gets_time_exceeded_from_the_ingress_port():
    probe = bytes(Ether(src="02:52:4c:00:05:01", dst=PORT_MAC)
                  / IP(src="198.19.1.2", dst="198.19.4.2", ttl=1) / UDP(sport=33434, dport=33435) / (b"x" * 32))
    reply = Ether(icmp_time_exceeded(probe, mac_bytes(PORT_MAC), PORT_IP))
    assert reply[Ether].dst == "02:52:4c:00:05:01" and reply[Ether].src == PORT_MAC
    assert reply[IP].src == "198.19.1.1" and reply[IP].dst == "198.19.1.2"
    assert reply[ICMP].type == 11 and reply[ICMP].code == 0
    assert reply[IPerror].dst == "198.19.4.2" and reply[UDPerror].dport == 33435
    rebuilt = Ether(bytes(reply))
    del rebuilt[IP].chksum, rebuilt[ICMP].chksum
    rebuilt = Ether(bytes(rebuilt))
    assert rebuilt[IP].chksum == reply[IP].chksum and rebuilt[ICMP].chksum == reply[ICMP].chksum


def test_icmp_errors_and_garbage_are_not_answered():
    error = bytes(Ether() / IP(src="198.19.1.2", dst="198.19.4.2", ttl=1) / ICMP(type=3, code=3) / (b"\x00" * 28))
    assert icmp_time_exceeded(error, mac_bytes(PORT_MAC), PORT_IP) is None
    assert icmp_time_exceeded(b"\x00" * 20, mac_bytes(PORT_MAC), PORT_IP) is None
    arp_like = bytes(Ether(type=0x0806) / (b"\x00" * 40))
    assert icmp_time_exceeded(arp_like, mac_bytes(PORT_MAC), PORT_IP) is None


class _Built(Exception):
    """Stops a switchd's construction once its FIB is read."""


def test_switchd_listens_for_route_changes_before_it_reads_the_fib(monkeypatch):
    """FRR installs routes while the agents start: a route added between switchd's first FIB
    dump and its netlink subscription would wait for the next change, and BGP may make none (a
    suite run beside a CPU-bound process once waited 45 s for such a route on a docker lab)."""
    from rocelab.switch import agent

    listening = []

    class Events:
        def __init__(self):
            listening.append(True)

    def read_fib(*args):
        raise _Built(bool(listening))

    monkeypatch.setattr(agent, "Events", Events)
    monkeypatch.setattr(agent.kernel_fib, "read_fib", read_fib)
    with pytest.raises(_Built) as built:
        agent.Switchd({"ports": []})
    assert built.value.args == (True,)
