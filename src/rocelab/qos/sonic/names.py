"""Which rocelab interface each SONiC port of a config_db is (lab_ports), and the VOQ line
cards a chassis file names (voq_hosts)."""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from rocelab.qos.ports import LAB_PORT, LANES_PER_PORT, lab_to_sonic, port_number

_PORT_NAME = re.compile(r"Ethernet(\d+)")


def _lanes(fields: object) -> int:
    lanes = fields.get("lanes", "") if isinstance(fields, dict) else ""
    first = str(lanes).split(",")[0]
    return int(first) if first.isdigit() else 1 << 30


def _index(fields: object) -> int:
    index = fields.get("index", "") if isinstance(fields, dict) else ""
    return int(index) if str(index).isdigit() else 1 << 30


def lab_ports(doc: Mapping[str, Any], named: Iterable[str]) -> dict[str, str]:
    """rocelab interface → SONiC port name: the PORT table's order (index, first lane,
    number) where the file has one; else the four-lane convention where every name fits it
    (none is written: rocelab.qos.ports computes it); else the names' numeric order. A PORT
    table whose every alias is a rocelab interface is rocelab's own rendering of a port map
    (render_config_db): the aliases are the interfaces."""
    table = doc.get("PORT")
    aliases = {n: f.get("alias") for n, f in table.items() if isinstance(f, dict)} \
        if isinstance(table, dict) else {}
    if aliases and all(isinstance(a, str) and LAB_PORT.fullmatch(a) for a in aliases.values()) \
            and len(set(aliases.values())) == len(aliases):
        mapping = {alias: name for name, alias in aliases.items()}
    elif isinstance(table, dict) and table:
        order = sorted((n for n in table if _PORT_NAME.fullmatch(n)),
                       key=lambda n: (_index(table[n]), _lanes(table[n]), port_number(n)))
        mapping = {f"eth{i}": name for i, name in enumerate(order, start=1)}
    else:
        mapping = {f"eth{i}": name for i, name in enumerate(sorted(set(named), key=port_number), start=1)}
    if all(lab_to_sonic(lab) == name for lab, name in mapping.items()) or (
            "PORT" not in doc and all(port_number(n) % LANES_PER_PORT == 0 for n in mapping.values())):
        return {}  # the four-lane convention: rocelab.qos.ports computes it
    return mapping


def voq_hosts(doc: Mapping[str, Any]) -> list[str]:
    """The "<host>|<asic>" line cards a file's VOQ keys (QUEUE, BUFFER_QUEUE) name, in order."""
    found: dict[str, None] = {}
    for table in ("QUEUE", "BUFFER_QUEUE"):
        entries = doc.get(table)
        for key in entries if isinstance(entries, dict) else ():
            parts = key.split("|")
            if len(parts) == 4:
                found.setdefault(f"{parts[0]}|{parts[1]}")
    return list(found)
