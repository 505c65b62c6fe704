"""Edits of a running config_db, as SONiC's `config`, `ecnconfig` and `pfcwd` make them.

Pure functions over the JSON document (tables of keys of fields, every value a string):
each returns a new document and leaves its input alone, or raises ConfigError with the
words SONiC's CLI would print. `check` is the one gate every change passes before it
reaches a running switch (the Generic Config Updater's "validate, then apply"), and
`plan` says what the switch must do to run the new document.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

import jsonpatch
import jsonpointer

from rocelab.errors import InputError
from rocelab.qos.model import QosProfile
from rocelab.qos.ports import lab_to_sonic, port_number
from rocelab.qos.sonic import QOS_TABLES, profile_from_config_db, switch_facts

Doc = dict[str, Any]
SONIC_PORT = re.compile(r"Ethernet\d+")
# ecnconfig's options and the WRED_PROFILE fields they set (sonic-utilities scripts/ecnconfig).
ECN_FIELDS = {"gmin": "green_min_threshold", "gmax": "green_max_threshold",
              "ymin": "yellow_min_threshold", "ymax": "yellow_max_threshold",
              "rmin": "red_min_threshold", "rmax": "red_max_threshold",
              "gdrop": "green_drop_probability", "ydrop": "yellow_drop_probability",
              "rdrop": "red_drop_probability"}
PORT_DEFAULT_MTU = "9100"


class ConfigError(ValueError):
    """A change SONiC would refuse: the message is what its CLI prints after "Error: "."""


def with_ports(doc: Doc, interfaces: dict[str, int]) -> Doc:
    """`doc` with a PORT entry for each lab interface (name → rate in b/s) it has none for:
    admin up, the lab's speed, SONiC's default MTU, the interface as alias (what
    rocelab.qos.sonic.lab_ports reads back as the port map)."""
    out = copy.deepcopy(doc)
    table = out.setdefault("PORT", {})
    for index, (name, rate_bps) in enumerate(sorted(interfaces.items(), key=lambda i: int(i[0][3:]))):
        sonic = lab_to_sonic(name)
        lane = port_number(sonic)
        table.setdefault(sonic, {"alias": name, "lanes": ",".join(str(lane + i) for i in range(4)),
                                 "speed": str(int(rate_bps // 1_000_000)), "mtu": PORT_DEFAULT_MTU,
                                 "admin_status": "up", "index": str(index)})
    return out


def ports(doc: Doc) -> list[str]:
    """The front-panel ports of the PORT table, in SONiC's order."""
    return sorted((p for p in doc.get("PORT", {}) if SONIC_PORT.fullmatch(p)), key=port_number)


def require_port(doc: Doc, port: str) -> None:
    if port not in doc.get("PORT", {}):
        raise ConfigError(f"Interface name is invalid. Please enter a valid interface name!! ({port!r}; ports: "
                          f"{', '.join(ports(doc))})")


def check(doc: Doc, source: str) -> QosProfile | None:
    """The profile a document gives switchd (None: no QoS table, every DSCP lossy in TC 0),
    after the readers' whole validation. Raises ConfigError with every problem."""
    try:
        switch_facts(doc, source)
        if not any(table in doc for table in QOS_TABLES):
            return None
        return profile_from_config_db(doc, source)
    except InputError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class Plan:
    """What a running switch does to run a new document."""

    reload: bool  # the QoS tables changed: a new pipeline with the new profile
    links: dict[str, dict[str, Any]]  # port → {"admin": "up"|"down", "mtu": N}: kernel link changes

    def describe(self) -> list[str]:
        lines = [f"{port}: link {what} {value}" for port, change in self.links.items()
                 for what, value in change.items()]
        if self.reload:
            lines.append("restarted the ASIC pipeline with the new QoS profile (counters carry on; frames "
                         "in its buffers at that moment were discarded)")
        return lines


def plan(old: Doc, new: Doc) -> Plan:
    links: dict[str, dict[str, Any]] = {}
    before, after = old.get("PORT", {}), new.get("PORT", {})
    for port, fields in after.items():
        was = before.get(port, {})
        if fields.get("admin_status", "up") != was.get("admin_status", "up"):
            links.setdefault(port, {})["admin"] = "down" if fields.get("admin_status") == "down" else "up"
        if fields.get("mtu", PORT_DEFAULT_MTU) != was.get("mtu", PORT_DEFAULT_MTU):
            links.setdefault(port, {})["mtu"] = int(fields.get("mtu", PORT_DEFAULT_MTU))
    reload = any(old.get(t) != new.get(t) for t in QOS_TABLES + ("DEVICE_METADATA", "CABLE_LENGTH"))
    return Plan(reload, links)


def changed_paths(old: Doc, new: Doc) -> list[str]:
    """The "TABLE/key" entries a change touches, for the time line's marker."""
    return sorted({"/".join(op["path"].split("/")[1:3]) for op in jsonpatch.make_patch(old, new).patch})


# --- the Generic Config Updater


def parse_patch(text: str, source: str) -> list[dict]:
    try:
        ops = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(ops, list) or not all(isinstance(op, dict) and "op" in op and "path" in op for op in ops):
        raise ConfigError(f"{source}: a JSON Patch (RFC 6902) is a list of operations like "
                          '{"op": "replace", "path": "/TABLE/KEY/field", "value": "..."}')
    return ops


def patched(doc: Doc, ops: list[dict]) -> Doc:
    """RFC 6902 applied to a copy; a patch that does not apply changes nothing."""
    try:
        return jsonpatch.JsonPatch(ops).apply(doc)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise ConfigError(f"the patch does not apply: {exc}") from None


# --- the commands' edits


def set_wred(doc: Doc, profile: str, fields: dict[str, int]) -> Doc:
    """ecnconfig -p PROFILE -gmin N …"""
    if profile not in doc.get("WRED_PROFILE", {}):
        raise ConfigError(f"Invalid profile name {profile!r}; profiles: {', '.join(doc.get('WRED_PROFILE', {})) or 'none'}")
    out = copy.deepcopy(doc)
    out["WRED_PROFILE"][profile].update({name: str(value) for name, value in fields.items()})
    return out


def pfc_priorities(doc: Doc, port: str) -> list[int]:
    text = doc.get("PORT_QOS_MAP", {}).get(port, {}).get("pfc_enable", "")
    return sorted(int(p) for p in text.split(",") if p.strip())


def set_pfc_priority(doc: Doc, port: str, priority: int, on: bool) -> Doc:
    """config interface pfc priority PORT PRIORITY on|off"""
    require_port(doc, port)
    now = set(pfc_priorities(doc, port))
    if on == (priority in now):
        raise ConfigError(f"Priority {priority} has already been {'enabled' if on else 'disabled'} on {port}")
    out = copy.deepcopy(doc)
    now = now | {priority} if on else now - {priority}
    out.setdefault("PORT_QOS_MAP", {}).setdefault(port, {})["pfc_enable"] = ",".join(map(str, sorted(now)))
    return out


def set_port(doc: Doc, port: str, **fields: str) -> Doc:
    """config interface shutdown|startup|mtu|pfc asymmetric: PORT fields."""
    require_port(doc, port)
    out = copy.deepcopy(doc)
    out["PORT"][port].update(fields)
    return out


def pfcwd_start(doc: Doc, port_names: list[str], action: str, detection_ms: int, restoration_ms: int) -> Doc:
    out = copy.deepcopy(doc)
    for port in port_names:
        require_port(doc, port)
        out.setdefault("PFC_WD", {})[port] = {"action": action, "detection_time": str(detection_ms),
                                              "restoration_time": str(restoration_ms)}
    return out


def pfcwd_stop(doc: Doc, port_names: list[str]) -> Doc:
    out = copy.deepcopy(doc)
    for port in port_names:
        require_port(doc, port)
        out.get("PFC_WD", {}).pop(port, None)
    return out


def qos_cleared(doc: Doc) -> Doc:
    """config qos clear: every QoS table gone."""
    return {table: fields for table, fields in copy.deepcopy(doc).items() if table not in QOS_TABLES}


def qos_reloaded(doc: Doc, template: Doc) -> Doc:
    """config qos reload: the QoS tables as the device's template renders them (here: the
    profile the lab brought the switch up with), the other tables as they are."""
    return qos_cleared(doc) | {t: copy.deepcopy(v) for t, v in template.items() if t in QOS_TABLES}


def set_pg_lossless(doc: Doc, port: str, pgs: str, profile: str | None, add: bool) -> Doc:
    """config interface buffer priority-group lossless add|remove PORT PGS [PROFILE]."""
    require_port(doc, port)
    if not re.fullmatch(r"[0-7](-[0-7])?", pgs):
        raise ConfigError(f"Invalid priority group {pgs!r} (expected N or N-M, 0 to 7)")
    key = f"{port}|{pgs}"
    out = copy.deepcopy(doc)
    table = out.setdefault("BUFFER_PG", {})
    if add:
        if profile is not None and profile not in doc.get("BUFFER_PROFILE", {}):
            raise ConfigError(f"Profile {profile} doesn't exist")
        table[key] = {"profile": profile or "NULL"}
    elif table.pop(key, None) is None:
        raise ConfigError(f"Priority group {key} does not exist")
    return out


def set_buffer_profile(doc: Doc, name: str, fields: dict[str, str], add: bool) -> Doc:
    """config buffer profile add|set NAME --xon … --xoff … --size … --dynamic_th … --pool …"""
    exists = name in doc.get("BUFFER_PROFILE", {})
    if add and exists:
        raise ConfigError(f"Profile {name} already exist")
    if not add and not exists:
        raise ConfigError(f"Profile {name} doesn't exist")
    out = copy.deepcopy(doc)
    entry = out.setdefault("BUFFER_PROFILE", {}).setdefault(name, {})
    if add:
        entry.setdefault("pool", "ingress_lossless_pool")
    entry.update(fields)
    return out
