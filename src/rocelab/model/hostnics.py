"""Hosts' NICs as their own tools describe them, named from fabric.yml (`hosts.nics`) or a
lab.yml (`nics`): per host name or glob, the saved output of `mlnx_qos -i IFACE`
(`mlnx_qos`) and of docs/hosts.md's collection command (`sysfs`), at least one of them.
`{host}` in a path stands for the host's name; each host matches at most one entry (its own
name beats a glob); a host no entry matches keeps the description's or lab's settings.

Both files read into one HostNicConfig (rocelab.qos.nic); problems name the YAML file and
key, or the NIC file, line and field. `nicd_roce` turns a reading into the settings nicd
runs with, so a lab's emulated NIC is the NIC the host has.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from rocelab.errors import InputError, Problems
from rocelab.paths import display
from rocelab.qos.nic import HostNicConfig, combine, read_mlnx_qos, read_nic_sysfs, roce_mtu_for
from rocelab.roce.config import roce_config
from rocelab.ethernet import PRIORITIES
from rocelab.qos.model import DSCP_VALUES
from rocelab.roce.dcqcn import connectx_files, connectx_rp
from rocelab.yamlfile import YamlDoc
from rocelab.yamlfile import at as _at

NIC_KEYS = ("mlnx_qos", "sysfs")
_READERS = {"mlnx_qos": read_mlnx_qos, "sysfs": read_nic_sysfs}


@dataclass(frozen=True)
class HostNic:
    """One host's NIC configuration and the files it was read from (None: not given)."""

    host: str
    mlnx_qos: str | None
    sysfs: str | None
    config: HostNicConfig


@dataclass(frozen=True)
class NicEntry:
    pattern: str  # a host name or a glob of them
    files: Mapping[str, str]  # "mlnx_qos"/"sysfs" → path, `{host}` not yet filled in


def nic_entries(doc: YamlDoc, raw: Any, path: tuple[str, ...], problems: Problems) -> list[NicEntry]:
    """The entries of a `nics:` mapping at `path` of `doc`."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        problems.add(_at(doc, *path), "is not a mapping of host names (or globs) to NIC files",
                     "like h1: {mlnx_qos: h1.mlnx_qos.txt, sysfs: h1.sysfs.txt}")
        return []
    entries = []
    for pattern, files in raw.items():
        here = (*path, str(pattern))
        if not isinstance(files, dict) or not files:
            problems.add(_at(doc, *here), "names no file" if isinstance(files, dict) or files is None
                         else f"{files!r} is not a mapping", "give `mlnx_qos: FILE`, `sysfs: FILE` or both")
            continue
        unknown = [k for k in files if k not in NIC_KEYS]
        for key in unknown:
            problems.add(_at(doc, *here, str(key)), f"unknown key {key!r}", f"expected one of: {', '.join(NIC_KEYS)}")
        bad = [k for k in NIC_KEYS if k in files and not isinstance(files[k], str)]
        for key in bad:
            problems.add(_at(doc, *here, key), f"{files[key]!r} is not a file name")
        if not unknown and not bad:
            entries.append(NicEntry(str(pattern), {k: files[k] for k in NIC_KEYS if k in files}))
    return entries


def read_host_nics(doc: YamlDoc, entries: Sequence[NicEntry], hosts: Sequence[str], base: Path,
                   path: tuple[str, ...], problems: Problems) -> dict[str, HostNic]:
    """Each host's entry and its files, read (relative to `base`)."""
    matched: dict[str, list[NicEntry]] = {}
    for entry in entries:
        names = [h for h in hosts if fnmatch.fnmatchcase(h, entry.pattern)]
        if not names:
            problems.add(_at(doc, *path, entry.pattern), f"{entry.pattern!r} matches no host of the topology",
                         f"hosts: {', '.join(hosts)}")
        for name in names:
            matched.setdefault(name, []).append(entry)
    nics = {}
    for host in hosts:
        candidates = matched.get(host, [])
        exact = [e for e in candidates if e.pattern == host]
        if len(exact or candidates) > 1:
            problems.add(_at(doc, *path), f"host {host} matches {len(candidates)} entries: "
                         f"{', '.join(e.pattern for e in candidates)}",
                         "give each host one entry (its own name beats a glob)")
            continue
        if not candidates:
            continue
        entry = (exact or candidates)[0]
        files = {key: base / file.replace("{host}", host) for key, file in entry.files.items()}
        configs = []
        for key, file in files.items():
            if not file.is_file():
                problems.add(_at(doc, *path, entry.pattern, key), f"{display(file)!r} is not a file"
                             + (f" (for host {host})" if entry.pattern != host else ""),
                             f"paths are relative to {display(base)}/")
                continue
            try:
                configs.append(_READERS[key](file.read_text(encoding="utf-8"), display(file)))
            except InputError as e:
                problems.items.extend(e.problems)
        if len(configs) == len(files):
            nics[host] = HostNic(host, *(display(files[k]) if k in files else None for k in NIC_KEYS),
                                 combine(*configs))
    return nics


def nicd_settings(nics: Mapping[str, HostNic], base: Mapping) -> tuple[dict[str, dict], list[str], list[str]]:
    """Per host, the `roce:` settings nicd runs with over the lab's (`base`); the notes on what
    the files hold that nicd cannot carry; and, per host whose files make no valid NIC, why."""
    settings, notes, invalid = {}, [], []
    for host, nic in nics.items():
        try:
            settings[host], said = nicd_roce(nic, base)
            roce_config({**base, **settings[host]})
        except ValueError as exc:
            invalid.append(f"{host}: what {nic.sysfs or nic.mlnx_qos} says makes no NIC: {exc}")
            continue
        notes += said
    return settings, notes, invalid


def nicd_roce(nic: HostNic, base: Mapping) -> tuple[dict, list[str]]:
    """The `roce:` settings an emulated NIC takes, over the lab's own (`base`), from what the
    host's tools said (ToS →
    DSCP, CNP DSCP and spacing, the trust state, the DSCP → priority map, the PFC priorities,
    DCQCN's roce_rp values over the `connectx` set, DCQCN on or off for RoCE's priority, the
    RoCE MTU), and notes on what it cannot carry."""
    c = nic.config
    roce: dict = {}
    notes = []
    if c.roce_tos is not None:
        roce["dscp"] = c.roce_tos >> 2  # the ToS byte's upper six bits; the ECN bits are the NIC's
    np = c.dcqcn_np or {}
    if "cnp_dscp" in np:
        roce["cnp_dscp"] = np["cnp_dscp"]
    if "min_time_between_cnps" in np:
        roce["cnp_interval_s"] = np["min_time_between_cnps"] * 1e-6
    if c.trust is not None:
        roce["trust"] = c.trust  # under pcp, RoCE's untagged frames are on priority 0
    if c.dscp_to_priority is not None:
        roce["dscp_to_priority"] = dict(enumerate(c.dscp_to_priority))
    if c.pfc_priorities is not None:
        roce["pfc_priorities"] = sorted(c.pfc_priorities)
    if c.dcqcn_rp is not None:
        roce["dcqcn"] = {"parameters": "connectx", **connectx_rp(c.dcqcn_rp)}
        if c.dcqcn_rp.get("rpg_max_rate"):  # 0: no cap
            notes.append(f"{nic.host}: roce_rp/rpg_max_rate {c.dcqcn_rp['rpg_max_rate']} Mb/s is not emulated "
                         "(the QP's rate is capped by the port only)")
    if c.rp_enabled is not None:
        merged = roce_config({**base, **roce})
        roce["cc_algorithm"] = "dcqcn" if merged.priority_of(merged.dscp) in c.rp_enabled else "none"
    if c.mtu_bytes is not None and roce_mtu_for(c.mtu_bytes) is not None:
        roce["pmtu_bytes"] = roce_mtu_for(c.mtu_bytes)
    return roce, notes


# How a ConnectX maps priorities to TCs out of the box (priority 0 to TC 1, 1 to TC 0: 802.1Q's
# order), each TC's algorithm left to the device: nicd has no ETS, so that is what it shows.
DEFAULT_PRIORITY_TO_TC = (1, 0, 2, 3, 4, 5, 6, 7)


def nic_view(settings: Mapping, port_rate_bps: float) -> HostNicConfig:
    """What a ConnectX's tools would show for a NIC running these `roce:` settings (nicd_roce's
    inverse): trust, DSCP map, PFC, DCQCN's roce_rp and roce_np files, RoCE's ToS. DCQCN's
    reaction point is on for every priority, or off for all, as the settings' cc_algorithm;
    the notification point always answers (nicd's does)."""
    c = roce_config(settings)
    return HostNicConfig(
        trust=c.trust, pfc_priorities=c.pfc_enabled(),
        dscp_to_priority=tuple(c.dscp_to_priority.get(d, 0) for d in range(DSCP_VALUES)),
        priority_to_tc=DEFAULT_PRIORITY_TO_TC, tsa={tc: "vendor" for tc in range(PRIORITIES)},
        dcqcn_rp=connectx_files(c.cc.dcqcn, port_rate_bps),
        dcqcn_np={"cnp_802p_prio": c.priority_of(c.cnp_dscp), "cnp_dscp": c.cnp_dscp,
                  "min_time_between_cnps": round(c.cnp_interval_s * 1e6)},
        rp_enabled=frozenset(range(PRIORITIES)) if c.cc_algorithm == "dcqcn" else frozenset(),
        np_enabled=frozenset(range(PRIORITIES)), roce_tos=c.dscp << 2)
