"""A QosProfile as config_db tables, written the way current SONiC writes them: one key per
port, plain-name references, PG and queue ranges like "Ethernet0|3-4"."""

from __future__ import annotations

import json
from typing import Mapping, TypeVar

from rocelab.qos.model import PRIORITIES, BufferPool, BufferProfile, QosProfile, Scheduler, WredProfile
from rocelab.qos.sonic.parse import _MAPS, _TC, _UNCONFIGURED, _MapSpec

T = TypeVar("T")


def _index_key(port: str, lo: int, hi: int) -> str:
    return f"{port}|{lo}" if lo == hi else f"{port}|{lo}-{hi}"


def _runs(items: Mapping[int, T]) -> list[tuple[int, int, T]]:
    """Consecutive indexes holding equal values, as (first, last, value)."""
    runs: list[tuple[int, int, T]] = []
    for index in sorted(items):
        if runs and index == runs[-1][1] + 1 and items[index] == runs[-1][2]:
            runs[-1] = (runs[-1][0], index, items[index])
        else:
            runs.append((index, index, items[index]))
    return runs


_Doc = dict[str, dict[str, dict[str, str]]]


def _put(doc: _Doc, table: str, name: str, fields: dict[str, str]) -> str:
    """Add a named entry once; the name, for the entry that references it."""
    if doc[table].setdefault(name, fields) != fields:
        raise ValueError(f"two different {table} entries are both named {name!r}")
    return name


def _pool_fields(pool: BufferPool) -> dict[str, str]:
    fields = {"type": pool.type, "mode": pool.mode, "size": str(pool.size_bytes)}
    if pool.xoff_bytes:
        fields["xoff"] = str(pool.xoff_bytes)
    return fields


def _buffer_profile_fields(profile: BufferProfile) -> dict[str, str]:
    fields = {"pool": profile.pool, "size": str(profile.size_bytes)}
    for name, value in (("dynamic_th", profile.dynamic_th),
                        ("static_th", profile.static_th_bytes),
                        ("xon", profile.xon_bytes),
                        ("xoff", profile.xoff_bytes),
                        ("xon_offset", profile.xon_offset_bytes)):
        if value is not None:
            fields[name] = str(value)
    return fields


def _wred_fields(profile: WredProfile) -> dict[str, str]:
    return {"wred_green_enable": "true" if profile.wred_green_enable else "false",
            "ecn": profile.ecn,
            "green_min_threshold": str(profile.green_min_threshold_bytes),
            "green_max_threshold": str(profile.green_max_threshold_bytes),
            "green_drop_probability": str(profile.green_drop_probability_pct)}


def _scheduler_fields(scheduler: Scheduler) -> dict[str, str]:
    # A strict queue has no weight; SONiC writes none unless one was set.
    if scheduler.type == "STRICT" and scheduler.weight == 1:
        return {"type": scheduler.type}
    return {"type": scheduler.type, "weight": str(scheduler.weight)}


def _priority_list(priorities: frozenset[int]) -> str:
    return ",".join(str(p) for p in sorted(priorities))


def _render_maps(doc: _Doc, profile: QosProfile) -> dict[str, dict[str, str]]:
    """Write the map tables; per port, the map names its PORT_QOS_MAP entry references.

    Maps keep the names they were loaded with; a hand-built port's maps get ROCELAB_<n>.
    A map equal to the unconfigured default and never named is not written at all.
    """
    references: dict[str, dict[str, str]] = {port: {} for port in profile.ports}
    unnamed: list[tuple[_MapSpec, str, dict[str, str]]] = []
    for spec in _MAPS:
        for port, qos in profile.ports.items():
            values = getattr(qos, spec.attr)
            default = getattr(_UNCONFIGURED, spec.attr)
            # TCs 8–15 only where they differ from SONiC's unmapped default: most files have eight.
            entries = {str(i): str(v) for i, v in enumerate(values)
                       if spec.key is not _TC or i < PRIORITIES or v != default[i]}
            name = getattr(qos.map_names, spec.field)
            if name is not None:
                references[port][spec.field] = _put(doc, spec.table, name, entries)
            elif values != getattr(_UNCONFIGURED, spec.attr):
                unnamed.append((spec, port, entries))
    # Named maps first, so a generated name never takes one the user chose.
    for spec, port, entries in unnamed:
        table = doc[spec.table]
        name = next((n for n, e in table.items() if e == entries), None)
        if name is None:
            name = next(f"ROCELAB_{n}" for n in range(1, len(table) + 2)
                        if f"ROCELAB_{n}" not in table)
            table[name] = entries
        references[port][spec.field] = name
    return references


def render_config_db(profile: QosProfile) -> _Doc:
    """The config_db QoS tables that load back to `profile` (other tables are not written).

    Raises ValueError if two different objects of `profile` share a name, which no loaded
    profile has.
    """
    doc: _Doc = {table: {} for table in (
        "PORT", "BUFFER_POOL", "BUFFER_PROFILE", "DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP",
        "TC_TO_PRIORITY_GROUP_MAP", "MAP_PFC_PRIORITY_TO_QUEUE", "PORT_QOS_MAP", "BUFFER_PG",
        "BUFFER_QUEUE", "WRED_PROFILE", "SCHEDULER", "QUEUE", "PFC_WD")}
    for name, pool in profile.pools.items():
        doc["BUFFER_POOL"][name] = _pool_fields(pool)
    # A port map other than the four-lane convention, as PORT aliases lab_ports() reads back.
    doc["PORT"] = {port: {"alias": lab} for lab, port in profile.lab_ports.items()}
    map_references = _render_maps(doc, profile)
    for port, qos in profile.ports.items():
        qos_map = map_references[port]
        if qos.pfc_enable:
            qos_map["pfc_enable"] = _priority_list(qos.pfc_enable)
        if qos.pfcwd_sw_enable is not None:
            qos_map["pfcwd_sw_enable"] = _priority_list(qos.pfcwd_sw_enable)
        if qos_map:
            doc["PORT_QOS_MAP"][port] = qos_map
        buffers = {q: queue.buffer for q, queue in qos.queues.items() if queue.buffer}
        for table, assigned in (("BUFFER_PG", qos.pgs), ("BUFFER_QUEUE", buffers)):
            for lo, hi, buffer in _runs(assigned):
                name = _put(doc, "BUFFER_PROFILE", buffer.name, _buffer_profile_fields(buffer))
                doc[table][_index_key(port, lo, hi)] = {"profile": name}
        scheduling = {q: (queue.scheduler, queue.wred) for q, queue in qos.queues.items()
                      if queue.scheduler or queue.wred}
        for lo, hi, (scheduler, wred) in _runs(scheduling):
            fields = {}
            if scheduler:
                fields["scheduler"] = _put(doc, "SCHEDULER", scheduler.name,
                                           _scheduler_fields(scheduler))
            if wred:
                fields["wred_profile"] = _put(doc, "WRED_PROFILE", wred.name, _wred_fields(wred))
            doc["QUEUE"][_index_key(port, lo, hi)] = fields
        if qos.pfc_wd:
            doc["PFC_WD"][port] = {"action": qos.pfc_wd.action,
                                   "detection_time": str(qos.pfc_wd.detection_time_ms),
                                   "restoration_time": str(qos.pfc_wd.restoration_time_ms)}
    return {table: entries for table, entries in doc.items() if entries}


def dump_config_db(profile: QosProfile) -> str:
    """`render_config_db` as JSON text, indented like the config_db.json SONiC saves."""
    return json.dumps(render_config_db(profile), indent=4) + "\n"
