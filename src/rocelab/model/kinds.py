"""What a node can be and run, registered by name (STYLE.md 4): node kinds, the switches'
data planes and the hosts' NIC backends. Engines, the traffic runtime and the lab's
records ask these objects instead of branching on strings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from rocelab.registry import Registry


@dataclass(frozen=True)
class NodeKind:
    name: str
    # A network OS container (SONiC-VS, cEOS) configures itself from its startup
    # configuration: only the clab engine runs it, rocelab's agents never run in it, and it
    # is always a switch.
    network_os: bool = False


@dataclass(frozen=True)
class Agent:
    """A node agent: the module a node runs and the name the lab's records give it."""

    name: str  # "switchd", "nicd", "verbs"
    module: str
    serves_many: bool = False  # one process may serve several nodes (its module takes several configurations)


@dataclass(frozen=True)
class Dataplane:
    """What rocelab's switches forward with."""

    name: str
    switch_sysctls: Mapping[str, str] = field(default_factory=dict)
    agent: Agent | None = None  # started in every rocelab switch by `up`


@dataclass(frozen=True)
class NicBackend:
    """What the hosts' RoCE traffic runs on."""

    name: str
    agent: Agent | None = None
    per_job: bool = False  # the agent is started by each traffic job, not by `up`


SWITCHD = Agent("switchd", "rocelab.switch.agent", serves_many=True)
NICD = Agent("nicd", "rocelab.roce.agent", serves_many=True)
VERBS = Agent("verbs", "rocelab.roce.verbs")

# The Linux kernel as the switch ("traditional DC" baseline): forward, and hash ECMP on the
# 5-tuple so a RoCE flow's UDP source port picks its path as a switch ASIC's hash would.
KERNEL_SWITCH_SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/ipv4/fib_multipath_hash_policy": "1",
    "net/ipv4/conf/all/rp_filter": "0",
    "net/ipv4/conf/default/rp_filter": "0",
    "net/ipv4/icmp_ratelimit": "0",  # traceroute through the fabric answers at every hop
}


def builtin_node_kinds() -> Registry[NodeKind]:
    kinds: Registry[NodeKind] = Registry("node kind")
    kinds.register("linux", NodeKind("linux"))
    kinds.register("sonic-vs", NodeKind("sonic-vs", network_os=True))
    kinds.register("arista_ceos", NodeKind("arista_ceos", network_os=True))
    return kinds


def builtin_dataplanes() -> Registry[Dataplane]:
    dataplanes: Registry[Dataplane] = Registry("data plane")
    dataplanes.register("switchd", Dataplane("switchd", agent=SWITCHD))
    dataplanes.register("kernel", Dataplane("kernel", switch_sysctls=KERNEL_SWITCH_SYSCTLS))
    return dataplanes


def builtin_nic_backends() -> Registry[NicBackend]:
    nics: Registry[NicBackend] = Registry("NIC backend")
    nics.register("emulated", NicBackend("emulated", agent=NICD))
    nics.register("verbs", NicBackend("verbs", agent=VERBS, per_job=True))
    nics.register("none", NicBackend("none"))
    return nics
