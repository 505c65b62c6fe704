"""What a config_db's QoS tables mean: named objects (pools, buffer profiles, WRED profiles,
schedulers, maps), then the per-port entries resolved against them, then one PortQos per
port (profile_from_config_db); and what buffermgrd and pfcwd read besides (switch_facts)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from rocelab.errors import Problems
from rocelab.qos.derived import PortFacts, SwitchFacts
from rocelab.qos.model import (
    BufferPool,
    BufferProfile,
    PfcWatchdog,
    PortQos,
    QosMapNames,
    QosProfile,
    QueueQos,
    Scheduler,
    WredProfile,
)
from rocelab.qos.ports import lab_to_sonic, port_number
from rocelab.qos.sonic.names import _PORT_NAME, lab_ports
from rocelab.qos.sonic.parse import (
    _BOOL, _BYTES, _DYNAMIC_TH, _ECN_MODE, _MAPS, _MTU, _PERCENT, _PFC_WD_ACTION, _POLL_MS, _POOL_BYTES,
    _POOL_MODE, _POOL_TYPE, _PRIORITIES, _RESTORATION_MS, _DETECTION_MS, _SCHEDULER_TYPE, _SPEED, _UNCONFIGURED,
    _WEIGHT, NULL, QOS_TABLES, _Choice, _Entry, _MapSpec, _json_kind, _quote, _setting, _table, _target_name,
    read_config_db,
)

_INDEX_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_CABLE_LENGTH = re.compile(r"[0-9]+m")


@dataclass
class _PortMaps:
    """One PORT_QOS_MAP entry: map name and resolved map per PortQos attribute."""

    maps: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    pfc_enable: frozenset[int] = frozenset()
    pfcwd_sw_enable: frozenset[int] | None = None


class _Reader:
    def __init__(self, doc: Mapping[str, Any], problems: Problems, voq_host: str | None = None):
        self.doc = doc
        self.problems = problems
        self.tables = frozenset(doc)
        self.notes: set[str] = set()
        # (table, port, index) → path of the key that set it, to report a second setting
        self.claimed: dict[tuple[str, str, int | None], str] = {}
        self.dynamic: dict[str, set[int]] = {}  # port → PGs whose profile buffermgrd computes
        metadata = doc.get("DEVICE_METADATA", {}).get("localhost", {}) if isinstance(
            doc.get("DEVICE_METADATA"), dict) else {}
        self.hostname = metadata.get("hostname") if isinstance(metadata, dict) else None
        self.asic = metadata.get("asic_name") if isinstance(metadata, dict) else None
        if voq_host is not None:  # the user names this device's own line card
            self.hostname, _, self.asic = voq_host.partition("|")

    def entries(self, table: str) -> Iterator[_Entry]:
        entries = self.doc.get(table, {})
        if not isinstance(entries, dict):
            self.problems.add(table, f"is {_json_kind(entries)} (expected an object of named "
                                     "entries)")
            return
        for key, fields in entries.items():
            entry = _Entry(table, key, fields, self.problems, self.tables, self.notes)
            if isinstance(fields, dict):
                yield entry
            else:
                entry.problem(None, f"is {_json_kind(fields)} (expected an object of fields)")

    # --- named objects

    def pools(self) -> dict[str, BufferPool]:
        pools = {}
        for e in self.entries("BUFFER_POOL"):
            e.check_fields(("type", "mode", "size", "xoff"))
            if "size" not in e.fields or e.fields.get("size") == NULL:
                self.notes.add("pools without a size (SONiC's dynamic buffer model sizes them at run time): "
                               "checks that need a pool's bytes are not applicable to them")
            pools[e.key] = BufferPool(
                name=e.key,
                type=e.get("type", _POOL_TYPE),
                mode=e.get("mode", _POOL_MODE, default="dynamic"),
                size_bytes=None if e.fields.get("size", NULL) == NULL else e.get("size", _POOL_BYTES),
                xoff_bytes=e.get("xoff", _BYTES, default=0),
            )
        return pools

    def buffer_profiles(self, pools: Mapping[str, BufferPool]) -> dict[str, BufferProfile]:
        profiles = {}
        for e in self.entries("BUFFER_PROFILE"):
            e.check_fields(("pool", "size", "dynamic_th", "static_th", "xon", "xoff",
                            "xon_offset"))
            pool = e.ref("pool", "BUFFER_POOL", pools)
            profiles[e.key] = BufferProfile(
                name=e.key,
                pool=pool.name if pool else "",
                size_bytes=e.get("size", _BYTES),
                dynamic_th=e.get("dynamic_th", _DYNAMIC_TH, default=None),
                static_th_bytes=e.get("static_th", _BYTES, default=None),
                xon_bytes=e.get("xon", _BYTES, default=None),
                xoff_bytes=e.get("xoff", _BYTES, default=None),
                xon_offset_bytes=e.get("xon_offset", _BYTES, default=None),
            )
            self._check_threshold(e, pool)
        return profiles

    @staticmethod
    def _check_threshold(e: _Entry, pool: BufferPool | None) -> None:
        given = [f for f in ("dynamic_th", "static_th") if f in e.fields]
        if len(given) != 1:
            e.problem(None, f"sets {' and '.join(given) or 'neither dynamic_th nor static_th'} "
                            "(expected exactly one: dynamic_th for a dynamic pool, static_th "
                            "for a static pool)")
        # A threshold mode other than the pool's is SAI's per-profile mode: the profile's decides.

    def wred_profiles(self) -> dict[str, WredProfile]:
        profiles = {}
        for e in self.entries("WRED_PROFILE"):
            e.check_fields(("wred_green_enable", "ecn", "green_min_threshold",
                            "green_max_threshold", "green_drop_probability"))
            kmin = e.get("green_min_threshold", _BYTES)
            kmax = e.get("green_max_threshold", _BYTES)
            if kmin is not None and kmax is not None and kmax < kmin:
                e.problem("green_max_threshold",
                          f"{e.fields['green_max_threshold']!r} is below green_min_threshold "
                          f"{e.fields['green_min_threshold']!r} (expected a byte count no "
                          "smaller than green_min_threshold)")
            # Defaults are those of SONiC's sonic-wred-profile YANG model.
            profiles[e.key] = WredProfile(
                name=e.key,
                wred_green_enable=e.get("wred_green_enable", _BOOL, default=False),
                ecn=e.get("ecn", _ECN_MODE, default="ecn_none"),
                green_min_threshold_bytes=kmin,
                green_max_threshold_bytes=kmax,
                green_drop_probability_pct=e.get("green_drop_probability", _PERCENT,
                                                 default=100),
            )
        return profiles

    def schedulers(self) -> dict[str, Scheduler]:
        schedulers = {}
        for e in self.entries("SCHEDULER"):
            e.check_fields(("type", "weight"))
            # Defaults are those of SONiC's sonic-scheduler YANG model.
            schedulers[e.key] = Scheduler(name=e.key,
                                          type=e.get("type", _SCHEDULER_TYPE, default="WRR"),
                                          weight=e.get("weight", _WEIGHT, default=1))
        return schedulers

    def qos_maps(self, spec: _MapSpec) -> dict[str, tuple[int, ...]]:
        maps = {}
        for e in self.entries(spec.table):
            values = list(getattr(_UNCONFIGURED, spec.attr))
            for key in e.fields:
                try:
                    index = spec.key.parse(key)
                except ValueError:
                    e.problem(None, f"{key!r} is not {spec.key.what} (expected "
                                    f"{spec.key.expected})")
                    continue
                value = e.get(key, spec.value)
                if value is not None:
                    values[index] = value
            maps[e.key] = tuple(values)
        return maps

    # --- per-port keys: "Ethernet0", "Ethernet0,Ethernet4" (older SONiC), "Ethernet0|3-4"

    def port_list(self, e: _Entry, text: str) -> list[str]:
        ports = []
        for name in text.split(","):
            if _PORT_NAME.fullmatch(name):
                ports.append(name)
            else:
                e.problem(None, f"{name!r} is not a SONiC port name (expected Ethernet<N>, like Ethernet0)",
                          self._lab_name_hint(name))
        return ports

    def own_port(self, e: _Entry, ports_text: str) -> str | None:
        """The port part of a key; for a VOQ key "<host>|<asic>|<port>", only this device's
        own (DEVICE_METADATA's hostname and asic_name), None for another line card's."""
        parts = ports_text.split("|")
        if len(parts) == 1:
            return ports_text
        if len(parts) != 3:
            e.problem(None, f'{e.key!r} is not a "<port>|<index>" or "<host>|<asic>|<port>|<index>" key')
            return None
        host, asic, port = parts
        if (host, asic) == self._own_voq(e.table):
            return port
        self.notes.add(f"{e.table}: VOQ system ports of other line cards, left to those devices")
        return None

    def _own_voq(self, table: str) -> tuple[str, str]:
        if self.hostname and self.asic:
            return self.hostname, self.asic
        host, asic, *_ = next(iter(self.doc.get(table, {})), "").split("|") + ["", ""]
        self.notes.add(f"{table}: VOQ keys but no DEVICE_METADATA hostname and asic_name; {host}|{asic} "
                       "(the first key's) read as this device's own")
        return host, asic

    @staticmethod
    def _lab_name_hint(name: str) -> str:
        try:
            return f"config_db names rocelab's {name} {lab_to_sonic(name)}"
        except ValueError:
            return ""

    def indexed(self, table: str, noun: str) -> Iterator[tuple[_Entry, list[str], range]]:
        for e in self.entries(table):
            ports_text, bar, index_text = e.key.rpartition("|")
            if not bar:
                e.problem(None, f'{e.key!r} is not a "<port>|<index>" key (expected e.g. '
                                '"Ethernet0|3" or "Ethernet0|3-4")')
                continue
            own = self.own_port(e, ports_text)
            if own is None:
                continue
            ports = self.port_list(e, own)
            indexes = self._index_range(e, index_text, noun)
            if indexes is not None:
                yield e, ports, indexes

    @staticmethod
    def _index_range(e: _Entry, text: str, noun: str) -> range | None:
        m = _INDEX_RANGE.fullmatch(text)
        if m:
            lo = int(m.group(1))
            hi = int(m.group(2) or lo)
            if lo <= hi <= 7:
                return range(lo, hi + 1)
        e.problem(None, f"{text!r} is not a {noun} index or range (expected an index from 0 "
                        'to 7 or a range like "3-4")')
        return None

    def claim(self, e: _Entry, port: str, index: int | None = None) -> bool:
        """True the first time a table sets this port (and index); later settings are errors."""
        first = self.claimed.setdefault((e.table, port, index), e.path())
        if first != e.path():
            what = port if index is None else f"index {index} of {port}"
            e.problem(None, f"sets {what} a second time (expected once; it is also set by "
                            f"{first})")
            return False
        return True

    # --- per-port tables

    def port_qos_maps(self, maps: Mapping[str, Mapping[str, tuple[int, ...]]]
                      ) -> tuple[_PortMaps, dict[str, _PortMaps]]:
        """The "global" entry (a switch-wide dscp_to_tc_map) and one entry per port."""
        global_maps, per_port = _PortMaps(), {}
        map_fields = tuple(spec.field for spec in _MAPS)
        for e in self.entries("PORT_QOS_MAP"):
            if e.key == "global":
                e.check_fields(map_fields)
                global_maps = _PortMaps(maps=self._referenced_maps(e, maps))
                continue
            e.check_fields(map_fields + ("pfc_enable", "pfcwd_sw_enable"))
            settings = _PortMaps(
                maps=self._referenced_maps(e, maps),
                pfc_enable=e.get("pfc_enable", _PRIORITIES, default=frozenset()),
                pfcwd_sw_enable=e.get("pfcwd_sw_enable", _PRIORITIES, default=None))
            for port in self.port_list(e, e.key):
                if self.claim(e, port):
                    per_port[port] = settings
        return global_maps, per_port

    @staticmethod
    def _referenced_maps(e: _Entry, maps: Mapping[str, Mapping[str, tuple[int, ...]]]
                         ) -> dict[str, tuple[str, tuple[int, ...]]]:
        referenced = {}
        for spec in _MAPS:
            if spec.field in e.fields:
                values = e.ref(spec.field, spec.table, maps[spec.table])
                if values is not None:
                    referenced[spec.attr] = (_target_name(e.fields[spec.field]), values)
        return referenced

    def buffer_assignments(self, table: str, noun: str, pool_type: str,
                           profiles: Mapping[str, BufferProfile],
                           pools: Mapping[str, BufferPool]) -> dict[str, dict[int, BufferProfile]]:
        """BUFFER_PG (ingress pool profiles per PG) or BUFFER_QUEUE (egress, per queue)."""
        assigned: dict[str, dict[int, BufferProfile]] = {}
        for e, ports, indexes in self.indexed(table, noun):
            e.check_fields(("profile",))
            if e.fields.get("profile") == NULL:
                # Dynamic buffer model: buffermgrd computes the lossless PG's profile from the
                # port's speed, cable length and MTU at run time.
                self.notes.add(f"{table} entries with profile NULL (buffermgrd computes them at run time): "
                               "lossless, their sizes not checkable from the file")
                for port in ports:
                    for index in indexes:
                        if self.claim(e, port, index):
                            self.dynamic.setdefault(port, set()).add(index)
                continue
            profile = e.ref("profile", "BUFFER_PROFILE", profiles)
            pool = pools.get(profile.pool) if profile else None
            if pool is not None and pool.type not in (None, "both", pool_type):
                e.problem("profile", f"{e.fields['profile']!r} draws from {pool.type} pool "
                                     f"{pool.name!r} (expected a profile of an {pool_type} "
                                     "pool)")
            for port in ports:
                for index in indexes:
                    if self.claim(e, port, index) and profile is not None:
                        assigned.setdefault(port, {})[index] = profile
        return assigned

    def queue_settings(self, schedulers: Mapping[str, Scheduler],
                       wred: Mapping[str, WredProfile]
                       ) -> dict[str, dict[int, tuple[Scheduler | None, WredProfile | None]]]:
        settings: dict[str, dict[int, tuple[Scheduler | None, WredProfile | None]]] = {}
        for e, ports, indexes in self.indexed("QUEUE", "queue"):
            e.check_fields(("scheduler", "wred_profile"))
            scheduler = e.ref("scheduler", "SCHEDULER", schedulers) \
                if "scheduler" in e.fields else None
            profile = e.ref("wred_profile", "WRED_PROFILE", wred) \
                if "wred_profile" in e.fields else None
            for port in ports:
                for index in indexes:
                    if self.claim(e, port, index):
                        settings.setdefault(port, {})[index] = (scheduler, profile)
        return settings

    def pfc_watchdogs(self) -> dict[str, PfcWatchdog]:
        watchdogs = {}
        for e in self.entries("PFC_WD"):
            if e.key == "GLOBAL":
                # The poll interval only sets how often SONiC looks; nothing to emulate.
                e.check_fields(("POLL_INTERVAL", "BIG_RED_SWITCH"))
                e.get("POLL_INTERVAL", _POLL_MS, default=None)
                continue
            e.check_fields(("action", "detection_time", "restoration_time"))
            watchdog = PfcWatchdog(action=e.get("action", _PFC_WD_ACTION),
                                   detection_time_ms=e.get("detection_time", _DETECTION_MS),
                                   restoration_time_ms=e.get("restoration_time",
                                                             _RESTORATION_MS))
            for port in self.port_list(e, e.key):
                if self.claim(e, port):
                    watchdogs[port] = watchdog
        return watchdogs


def profile_from_config_db(doc: dict[str, Any], source: str, voq_host: str | None = None) -> QosProfile:
    """The QoS profile a config_db document describes; `voq_host` ("<host>|<asic>") picks the
    line card whose VOQ keys are this device's own. Raises InputError naming `source`."""
    problems = Problems(source)
    if not isinstance(doc, dict):
        problems.add("", f"the document is {_json_kind(doc)} (expected a config_db object of "
                         'tables like {"BUFFER_POOL": {…}})')
        problems.raise_if_any()
    if not any(table in doc for table in QOS_TABLES):
        problems.add("", f"holds no QoS table (expected at least one of {', '.join(QOS_TABLES)}); "
                         f"tables present: {', '.join(sorted(doc)) or 'none'}")
        problems.raise_if_any()
    reader = _Reader(doc, problems, voq_host)

    pools = reader.pools()
    buffer_profiles = reader.buffer_profiles(pools)
    wred = reader.wred_profiles()
    schedulers = reader.schedulers()
    maps = {spec.table: reader.qos_maps(spec) for spec in _MAPS}

    global_maps, port_maps = reader.port_qos_maps(maps)
    pgs = reader.buffer_assignments("BUFFER_PG", "priority group", "ingress", buffer_profiles,
                                    pools)
    queue_buffers = reader.buffer_assignments("BUFFER_QUEUE", "queue", "egress",
                                              buffer_profiles, pools)
    queue_settings = reader.queue_settings(schedulers, wred)
    watchdogs = reader.pfc_watchdogs()
    problems.raise_if_any()

    names = set(port_maps) | set(pgs) | set(queue_buffers) | set(queue_settings) | set(watchdogs) | \
        set(reader.dynamic)
    ports = {}
    for port in sorted(names, key=port_number):
        settings = port_maps.get(port, _PortMaps())
        resolved, map_names = {}, {}
        for spec in _MAPS:
            chosen = settings.maps.get(spec.attr) or global_maps.maps.get(spec.attr)
            if chosen:
                map_names[spec.field], resolved[spec.attr] = chosen
        buffers = queue_buffers.get(port, {})
        scheduling = queue_settings.get(port, {})
        queues = {}
        for q in sorted(set(buffers) | set(scheduling)):
            scheduler, wred = scheduling.get(q, (None, None))
            queues[q] = QueueQos(scheduler=scheduler, wred=wred, buffer=buffers.get(q))
        ports[port] = PortQos(port=port, **resolved,
                              pfc_enable=settings.pfc_enable,
                              pfcwd_sw_enable=settings.pfcwd_sw_enable,
                              pgs=dict(sorted(pgs.get(port, {}).items())),
                              queues=queues,
                              pfc_wd=watchdogs.get(port),
                              map_names=QosMapNames(**map_names),
                              dynamic_pgs=frozenset(reader.dynamic.get(port, ())))
    return QosProfile(source=source, pools=pools, ports=ports, lab_ports=lab_ports(doc, ports),
                      notes=tuple(sorted(reader.notes)))


def switch_facts(doc: Mapping[str, Any], source: str) -> SwitchFacts:
    """What buffermgrd and pfcwd read besides the QoS tables: PORT (speed, mtu, admin_status,
    role), CABLE_LENGTH, DEVICE_METADATA (buffer_model, default_pfcwd_status), DEVICE_NEIGHBOR,
    which PORT_QOS_MAP entries set pfc_enable, and the BUFFER_PROFILE entries. Raises
    InputError naming the table, key and field of a malformed value."""
    problems = Problems(source)
    ports: dict[str, dict[str, Any]] = {}
    for name, fields in _table(doc, "PORT").items():
        if not _PORT_NAME.fullmatch(name) or not isinstance(fields, dict):
            continue
        entry = _Entry("PORT", name, fields, problems)
        speed = entry.get("speed", _SPEED, default=None)  # canonical digits: str() gives it back
        ports[name] = {"speed": None if speed is None else str(speed),
                       "mtu_bytes": entry.get("mtu", _MTU, default=None),
                       "admin_up": fields.get("admin_status") == "up",
                       "internal": fields.get("role") == "Int"}
    for group, lengths in _table(doc, "CABLE_LENGTH").items():
        for name, length in lengths.items() if isinstance(lengths, dict) else ():
            where = f"CABLE_LENGTH.{_quote(group)}.{_quote(name)}"
            if not isinstance(length, str) or not _CABLE_LENGTH.fullmatch(length):
                problems.add(where, f"{length!r} is not a cable length (expected metres like \"40m\")")
                continue
            ports.setdefault(name, {}).update(cable=length, cable_where=where)
    neighbours = doc.get("DEVICE_NEIGHBOR")
    pfc_enable = {port for key, fields in _table(doc, "PORT_QOS_MAP").items()
                  if isinstance(fields, dict) and "pfc_enable" in fields for port in key.split(",")}
    buffer_model = _setting(doc, "buffer_model", _Choice("a buffer model", ("traditional", "dynamic")),
                            "traditional", problems)
    pfcwd = _setting(doc, "default_pfcwd_status", _Choice("a PFC watchdog status", ("enable", "disable")),
                     "disable", problems)
    problems.raise_if_any()
    reader = _Reader(doc, Problems(source))  # the loader has reported its problems already
    return SwitchFacts(ports={name: PortFacts(**facts) for name, facts in ports.items()},
                       port_entries=len(_table(doc, "PORT")), buffer_model=buffer_model,
                       default_pfcwd_status=pfcwd,
                       neighbours=frozenset(neighbours) if isinstance(neighbours, dict) else None,
                       pfc_enable_ports=frozenset(pfc_enable),
                       buffer_profiles=reader.buffer_profiles(reader.pools()))


def load_config_db(path: str | os.PathLike[str]) -> QosProfile:
    """Load a config_db.json (whole, or only its QoS tables). Raises InputError."""
    source = os.fspath(path)
    return profile_from_config_db(read_config_db(source), source)
