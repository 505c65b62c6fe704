"""EOS port names ⇄ rocelab's: `Ethernet1` is eth1; a file with modular or breakout names
(`Ethernet3/1`, `Ethernet1/2/1`) numbers its Ethernet interfaces in their natural order."""

from __future__ import annotations

import re
from typing import Sequence

from rocelab.qos.ports import lab_to_sonic

_EOS_PORT = re.compile(r"^Ethernet([1-9]\d*)$")
_EOS_ETHERNET = re.compile(r"^Ethernet(\d+(?:/\d+){0,2})$")
_PORT_CHANNEL = re.compile(r"^Port-Channel([1-9]\d*)$")


def eos_to_lab(name: str) -> str:
    """EOS `Ethernet1` → rocelab `eth1`."""
    m = _EOS_PORT.match(name)
    if not m:
        raise ValueError(f"{name!r} is not an EOS port name like Ethernet1, Ethernet2, …")
    return f"eth{m.group(1)}"


def lab_to_eos(name: str) -> str:
    """rocelab `eth1` → EOS `Ethernet1`."""
    lab_to_sonic(name)  # raises ValueError for anything but eth1, eth2, …
    return f"Ethernet{name[3:]}"


def _natural(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in _EOS_ETHERNET.match(name).group(1).split("/"))


def eos_lab_names(names: Sequence[str]) -> dict[str, str]:
    """EOS Ethernet interface names → rocelab's: `EthernetN` is ethN; in a file with modular
    or breakout names (`Ethernet3/1`, `Ethernet1/2/1`), the Nth in natural order is ethN."""
    if all(_EOS_PORT.match(n) for n in names):
        return {n: eos_to_lab(n) for n in names}
    return {n: f"eth{i}" for i, n in enumerate(sorted(set(names), key=_natural), 1)}
