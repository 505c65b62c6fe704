"""Human tables and JSON documents for what rocelab shows."""

from __future__ import annotations

from rich.table import Table

from rocelab.engines.state import LabState


def _alive(record: LabState, engines) -> dict[str, bool]:
    return engines.get(record.engine).alive(record)


def status_json(record: LabState, engines) -> dict:
    alive = _alive(record, engines)
    return {
        "name": record.name,
        "engine": record.engine,
        "status": record.status if all(alive.values()) else "degraded",
        "source": record.source,
        "dataplane": record.dataplane,
        "tdf": record.tdf,
        "tdf_choice": record.tdf_choice,
        "nodes": [
            {"name": n.name, "role": n.role, "netns": n.netns, "running": alive[n.name],
             "interfaces": [{"name": i.name, "address": i.address, "peer": i.peer, "mac": i.mac}
                            for i in n.interfaces]}
            for n in record.nodes
        ],
    }


def status_table(record: LabState, engines) -> Table:
    doc = status_json(record, engines)
    table = Table(title=f"{doc['name']} — {doc['status']} · engine {doc['engine']} · data plane "
                        f"{doc['dataplane']} · TDF {doc['tdf']} · {doc['source']}", title_justify="left")
    if record.tdf_choice:
        table.caption = f"TDF {record.tdf} ({record.tdf_choice['how']}): {record.tdf_choice['why']}"
        table.caption_justify = "left"
    for column in ("node", "role", "netns", "interface", "address", "peer"):
        table.add_column(column)
    for node in doc["nodes"]:
        name = node["name"] if node["running"] else f"{node['name']} (gone)"
        for i, iface in enumerate(node["interfaces"]):
            first = i == 0
            table.add_row(name if first else "", node["role"] if first else "", node["netns"] if first else "",
                          iface["name"], iface["address"], iface["peer"], end_section=i == len(node["interfaces"]) - 1)
    return table
