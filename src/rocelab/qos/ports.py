"""SONiC port names ↔ rocelab interface names.

SONiC-VS wires its front-panel ports to the container's ethN interfaces with four
lanes per port: Ethernet0 ↔ eth1, Ethernet4 ↔ eth2, …, Ethernet(4·(M−1)) ↔ ethM.
rocelab uses the same convention, so a config_db.json exported from a SONiC-VS lab
and one written for rocelab name the same ports.
"""

from __future__ import annotations

import re

LANES_PER_PORT = 4
_SONIC = re.compile(r"^Ethernet(\d+)$")
_LAB = re.compile(r"^eth(\d+)$")
LAB_PORT = re.compile(r"eth[1-9][0-9]*")  # a rocelab interface name: eth1, eth2, …


def sonic_to_lab(name: str) -> str:
    m = _SONIC.match(name)
    if not m or int(m.group(1)) % LANES_PER_PORT:
        raise ValueError(f"{name!r} is not a SONiC port name like Ethernet0, Ethernet4, …")
    return f"eth{int(m.group(1)) // LANES_PER_PORT + 1}"


def lab_to_sonic(name: str) -> str:
    m = _LAB.match(name)
    if not m or int(m.group(1)) < 1:
        raise ValueError(f"{name!r} is not a rocelab port name like eth1, eth2, …")
    return f"Ethernet{(int(m.group(1)) - 1) * LANES_PER_PORT}"


def port_number(name: str) -> int:
    """The number of a SONiC port name: Ethernet12 → 12, for ordering ports as SONiC does."""
    return int(name.removeprefix("Ethernet"))


def to_sonic(name: str) -> str:
    """Either form in, the SONiC form out."""
    return name if _SONIC.match(name) else lab_to_sonic(name)
