"""Human tables and JSON documents for what rocelab shows."""

from __future__ import annotations

from rich.table import Table

from rocelab.engines.state import LabState
from rocelab.kernel import awake, control

PIPELINE_NAMES = {"c": "C", "python": "Python"}


def _alive(record: LabState, engines) -> dict[str, bool]:
    return engines.get(record.engine).alive(record)


def switch_pipelines(record: LabState) -> dict[str, dict]:
    """Which pipeline each switchd runs and why (its `ping`), for those that answer."""
    found = {}
    for proc in record.processes:
        if proc["what"] != "switchd":
            continue
        try:
            reply = control.request(control.socket_path(record.name, proc["node"]), "ping", timeout_s=1.0)
        except (control.AgentUnreachable, RuntimeError):
            continue
        if "pipeline" in reply:
            found[proc["node"]] = {"pipeline": reply["pipeline"], "why": reply.get("pipeline_why", "")}
    return found


def status_json(record: LabState, engines) -> dict:
    alive = _alive(record, engines)
    pipelines = switch_pipelines(record)
    return {
        "name": record.name,
        "engine": record.engine,
        "status": record.status if all(alive.values()) else "degraded",
        "source": record.source,
        "dataplane": record.dataplane,
        "tdf": record.tdf,
        "tdf_choice": record.tdf_choice,
        # "static", or "bgp" with each switch's BGP source ("how") and what its rendering left out;
        # "narrower": switches BGP left with fewer next hops; "fallback": why static where BGP was the default
        "routing": {"mode": record.routing.get("mode", "static"), "switches": record.routing.get("switches", {}),
                    "fib_routes_per_s": record.routing.get("fib_routes_per_s"),
                    "narrower": record.routing.get("narrower", []), "fallback": record.routing.get("fallback")},
        # rocelab.kernel.awake: how the CPUs are kept from halting while the lab is up, by how many processes
        "awake": {"how": awake.running(record.awake), "processes": len(record.awake)},
        "nodes": [
            {"name": n.name, "role": n.role, "netns": n.netns, "running": alive[n.name],
             "pipeline": pipelines.get(n.name),  # a switch's: {"pipeline": "c" | "python", "why"}
             "interfaces": [{"name": i.name, "address": i.address, "peer": i.peer, "mac": i.mac}
                            for i in n.interfaces]}
            for n in record.nodes
        ],
    }


def routing_lines(routing: dict) -> list[str]:
    """How the switches route: one line for static; for bgp, each switch's BGP configuration
    source (switches sharing one, one line) and what its rendering warned about."""
    rate = routing.get("fib_routes_per_s")
    programming = [f"FIB changes programmed at {rate:,.0f} routes/s of production time"] if rate else []
    if routing["mode"] != "bgp":
        how = routing.get("fallback") or "rocelab's ECMP routes"
        return [f"routing: static ({how})"] + programming
    by_how: dict[str, list[str]] = {}
    for name, switch in routing["switches"].items():
        by_how.setdefault(switch["how"], []).append(name)
    lines = [f"routing: bgp (FRR) on {', '.join(names)}: {how}" for how, names in by_how.items()]
    lines += [f"BGP settled on fewer next hops than the fabric's equal-cost paths: {', '.join(routing['narrower'])}"
              ] if routing.get("narrower") else []
    return lines + programming + [f"{name}: {note}" for name, switch in routing["switches"].items()
                                  for note in switch["notes"]]


def awake_line(kept: dict) -> str:
    """What `status` says of the lab's keep-awake processes (rocelab.kernel.awake)."""
    if kept["how"] == awake.PM_QOS_MODE:
        return (f"CPUs kept awake: by the kernel's polling idle, a PM QoS request of 0 µs on {awake.PM_QOS} (a "
                f"halted vCPU wakes late; {awake.KEEP_AWAKE_ENV}=0 at `up` holds none)")
    if kept["how"] == "spinners":
        return (f"CPUs kept awake: {kept['processes']}, by idle-priority spinners (a halted vCPU wakes late; "
                f"{awake.KEEP_AWAKE_ENV}=0 at `up` starts none)")
    return (f"CPUs kept awake: none ({awake.KEEP_AWAKE_ENV}=0 at `up`): a halted vCPU wakes late, so the agents "
            "may fall behind at a TDF `up` picked with them")


def status_table(record: LabState, engines) -> Table:
    doc = status_json(record, engines)
    table = Table(title=f"{doc['name']} — {doc['status']} · engine {doc['engine']} · data plane "
                        f"{doc['dataplane']} · TDF {doc['tdf']} · {doc['source']}", title_justify="left")
    captions = []
    if record.tdf_choice:
        captions.append(f"TDF {record.tdf} ({record.tdf_choice['how']}): {record.tdf_choice['why']}")
    captions += [f"{n['name']} runs the {PIPELINE_NAMES[n['pipeline']['pipeline']]} "
                 f"pipeline: {n['pipeline']['why']}" for n in doc["nodes"] if n["pipeline"]]
    captions += routing_lines(doc["routing"])
    captions.append(awake_line(doc["awake"]))
    if captions:
        table.caption = "\n".join(captions)
        table.caption_justify = "left"
    for column in ("node", "role", "netns", "pipeline", "interface", "address", "peer"):
        table.add_column(column)
    for node in doc["nodes"]:
        name = node["name"] if node["running"] else f"{node['name']} (gone)"
        pipeline = node["pipeline"]["pipeline"] if node["pipeline"] else ""
        for i, iface in enumerate(node["interfaces"]):
            first = i == 0
            table.add_row(name if first else "", node["role"] if first else "", node["netns"] if first else "",
                          pipeline if first else "", iface["name"], iface["address"], iface["peer"],
                          end_section=i == len(node["interfaces"]) - 1)
    return table
