"""A ConnectX NIC's QoS and DCQCN configuration, read from what NVIDIA's tools print.

Two readers, pure functions over the text a user saved on a host (docs/hosts.md):

- `read_mlnx_qos(text, file)`: the output of `mlnx_qos -i IFACE`. It holds the trust state
  (`Priority trust state: dscp`), the `dscp2prio mapping:` (one `prio:N dscp:a,b,…,` line per
  priority), `Receive buffer size (bytes): a,b,…` (one size per receive buffer), `Cable len: N`
  (metres: what the NIC sizes its own headroom for), the `PFC configuration:` table (rows
  `priority`, `enabled` and, on newer tools, `buffer`: the receive buffer of each priority)
  and one block per TC: `tc: N ratelimit: …, tsa: ets|strict|vendor[, bw: N%]` followed by a
  `priority: P` line per priority in that TC. Versions differ in spacing, trailing commas,
  whether dscp2prio is printed under trust pcp and whether the buffer lines are there at
  all: spacing is free, a line the reader does not know is skipped, and a known line whose
  values do not mean what they must is an error.
- `read_nic_sysfs(text, file)`: the output of the collection command (COLLECT), `PATH=VALUE`
  lines for every file under `/sys/class/net/IFACE/ecn/roce_np/` and `…/roce_rp/` (DCQCN's
  notification and reaction points), their `enable/P` files (one per priority),
  `/sys/kernel/config/rdma_cm/DEV/ports/1/default_roce_tos` (the ToS RDMA-CM gives RoCE
  connections; empty when configfs holds no entry for DEV: never set, so 0), then
  `ip link show IFACE` (the netdev MTU).

Each reader returns a HostNicConfig whose fields the input does not give are None; `combine`
joins the two. `where[field]` names the file and line a value came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Literal, Mapping

from rocelab.errors import Problems
from rocelab.ethernet import PRIORITIES
from rocelab.qos.model import DSCP_VALUES

# The command a user runs on each host (IFACE: the RoCE netdev, DEV: its RDMA device).
COLLECT = (
    'for f in /sys/class/net/IFACE/ecn/roce_np/* /sys/class/net/IFACE/ecn/roce_rp/* '
    '/sys/class/net/IFACE/ecn/roce_np/enable/* /sys/class/net/IFACE/ecn/roce_rp/enable/* '
    '/sys/kernel/config/rdma_cm/DEV/ports/1/default_roce_tos; '
    'do [ -d "$f" ] || echo "$f=$(cat "$f" 2>/dev/null)"; done; ip link show IFACE'
)
TSAS = ("strict", "ets", "vendor")
IB_MTUS = (256, 512, 1024, 2048, 4096)  # the RDMA path MTUs a QP can have
# What the kernel takes off the netdev MTU for RoCE (iboe_get_mtu): GRH 40 + UDP 8 + BTH 12 +
# XRC 4 + AtomicETH 28 + ICRC 4, the largest headers a RoCE packet can carry.
IBOE_HEADER_BYTES = 40 + 8 + 12 + 4 + 28 + 4


def roce_mtu_for(netdev_mtu_bytes: int) -> int | None:
    """The RDMA MTU the kernel gives RoCE on a netdev of this MTU (None: too small for any)."""
    fitting = [m for m in IB_MTUS if m <= netdev_mtu_bytes - IBOE_HEADER_BYTES]
    return fitting[-1] if fitting else None

Trust = Literal["pcp", "dscp"]


@dataclass(frozen=True)
class HostNicConfig:
    """What one NIC does, as its tools print it. None: the input does not say."""

    trust: Trust | None = None
    pfc_priorities: frozenset[int] | None = None
    dscp_to_priority: tuple[int, ...] | None = None  # 64 entries
    buffer_sizes_bytes: tuple[int, ...] | None = None  # per receive buffer
    priority_to_buffer: tuple[int, ...] | None = None  # 8 entries
    cable_len_m: int | None = None
    priority_to_tc: tuple[int, ...] | None = None  # 8 entries
    tsa: Mapping[int, str] | None = None  # TC → strict, ets or vendor
    bw_percent: Mapping[int, int] | None = None  # TC → ETS share, where printed
    dcqcn_rp: Mapping[str, int] | None = None  # roce_rp file → value
    dcqcn_np: Mapping[str, int] | None = None  # roce_np file → value
    rp_enabled: frozenset[int] | None = None  # priorities whose roce_rp/enable/P is 1
    np_enabled: frozenset[int] | None = None
    roce_tos: int | None = None
    mtu_bytes: int | None = None  # the netdev's (IP) MTU
    where: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def roce_dscp(self) -> int | None:
        return None if self.roce_tos is None else self.roce_tos >> 2


def combine(*configs: HostNicConfig) -> HostNicConfig:
    """One HostNicConfig from several readers' results: each field from the one that gives it."""
    out = HostNicConfig()
    for config in configs:
        given = {f.name: getattr(config, f.name) for f in fields(config)
                 if f.name != "where" and getattr(config, f.name) is not None}
        out = replace(out, **given, where={**out.where, **config.where})
    return out


def _numbers(text: str) -> list[str]:
    return [n for n in re.split(r"[\s,]+", text.strip()) if n]


class _Lines:
    """One file's problems, and where each value came from (`where`: "FILE line N (field)")."""

    def __init__(self, file: str):
        self.file = file
        self.problems = Problems(file)
        self.where: dict[str, str] = {}

    def bad(self, line: int, what: str, value: str, expected: str) -> None:
        self.problems.add(f"line {line} ({what})", f"{value.strip()!r} is not valid",
                          f"expected {expected}")

    def seen(self, name: str, line: int, what: str) -> None:
        self.where[name] = f"{self.file} line {line} ({what})"

    def ints(self, line: int, what: str, text: str, lo: int, hi: int, count: int | None = None,
             expected: str = "") -> list[int] | None:
        values = _numbers(text)
        ok = all(v.isdigit() and lo <= int(v) <= hi for v in values) and (
            count is None or len(values) == count)
        if not ok or not values:
            self.bad(line, what, text, expected or (
                f"{count if count else 'some'} whole numbers from {lo} to {hi}"))
            return None
        return [int(v) for v in values]


# ---------------------------------------------------------------- mlnx_qos -i IFACE

_TRUST = re.compile(r"^priority\s+trust\s+state\s*:\s*(\S*)\s*$", re.I)
_DSCP2PRIO = re.compile(r"^dscp2prio\s+mapping\s*:\s*$", re.I)
_PRIO_DSCP = re.compile(r"^prio\s*:\s*(\S+)\s+dscp\s*:\s*(.*)$", re.I)
_BUFFERS = re.compile(r"^receive\s+buffer\s+size\s*\(bytes\)\s*:\s*(.*)$", re.I)
_CABLE = re.compile(r"^cable\s+len\s*:\s*(.*)$", re.I)
_PFC = re.compile(r"^pfc\s+configuration\s*:\s*$", re.I)
_PFC_ROW = re.compile(r"^(priority|enabled|buffer)\s+(.*)$", re.I)
_TC = re.compile(r"^tc\s*:\s*(\S+)(.*)$", re.I)
_TSA = re.compile(r"\btsa\s*:\s*([A-Za-z]+)", re.I)
_BW = re.compile(r"\bbw\s*:\s*(\d+)\s*%", re.I)
_TC_PRIORITY = re.compile(r"^priority\s*:\s*(.*)$", re.I)


def read_mlnx_qos(text: str, file: str) -> HostNicConfig:
    """The NIC's QoS from `mlnx_qos -i IFACE` output (module docstring). InputError naming
    the file, line and field of every value that does not parse."""
    lines = _Lines(file)
    values: dict = {}
    dscp_to_priority: dict[int, int] = {}
    priority_to_tc: dict[int, int] = {}
    tsa: dict[int, str] = {}
    bw: dict[int, int] = {}
    section = None  # "dscp2prio", "pfc" or ("tc", N): what the indented lines belong to
    dscp2prio_line = last_tc_line = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if m := _TRUST.match(line):
            section = None
            if m[1].lower() in ("pcp", "dscp"):
                values["trust"] = m[1].lower()
                lines.seen("trust", n, "Priority trust state")
            else:
                lines.bad(n, "Priority trust state", m[1], "pcp or dscp")
        elif _DSCP2PRIO.match(line):
            section, dscp2prio_line = "dscp2prio", n
        elif section == "dscp2prio" and (m := _PRIO_DSCP.match(line)):
            prio = lines.ints(n, "dscp2prio prio", m[1], 0, PRIORITIES - 1, 1)
            dscps = lines.ints(n, f"dscp2prio prio:{m[1]} dscp", m[2], 0, DSCP_VALUES - 1,
                               expected="DSCPs from 0 to 63, comma separated")
            if not (prio and dscps):
                continue
            for dscp in dscps:
                if dscp in dscp_to_priority:
                    lines.bad(n, f"dscp2prio prio:{prio[0]} dscp", str(dscp),
                              f"each DSCP once (DSCP {dscp} is already on priority "
                              f"{dscp_to_priority[dscp]})")
                dscp_to_priority[dscp] = prio[0]
                lines.seen(f"dscp_to_priority.{dscp}", n, f"dscp2prio prio:{prio[0]}")
        elif m := _BUFFERS.match(line):
            section = None
            sizes = m[1].split("max_buffer_size")[0]  # newer tools append the total
            parsed = lines.ints(n, "Receive buffer size (bytes)", sizes, 0, 2**40,
                                expected="byte counts, comma separated")
            if parsed:
                values["buffer_sizes_bytes"] = tuple(parsed)
                lines.seen("buffer_sizes_bytes", n, "Receive buffer size (bytes)")
        elif m := _CABLE.match(line):
            section = None
            cable = lines.ints(n, "Cable len", m[1], 0, 100_000, 1, "a length in metres")
            if cable:
                values["cable_len_m"] = cable[0]
                lines.seen("cable_len_m", n, "Cable len")
        elif _PFC.match(line):
            section = "pfc"
        elif section == "pfc" and (m := _PFC_ROW.match(line)):
            row = m[1].lower()
            what = f"PFC configuration {row}"
            if row == "priority":
                lines.ints(n, what, m[2], 0, PRIORITIES - 1, PRIORITIES,
                           "the priorities 0 to 7 as column heads")
            elif row == "enabled":
                flags = lines.ints(n, what, m[2], 0, 1, PRIORITIES, "eight 0 or 1 flags")
                if flags:
                    values["pfc_priorities"] = frozenset(p for p, on in enumerate(flags) if on)
                    lines.seen("pfc_priorities", n, what)
            else:
                buffers = lines.ints(n, what, m[2], 0, PRIORITIES - 1, PRIORITIES,
                                     "eight buffer numbers")
                if buffers:
                    values["priority_to_buffer"] = tuple(buffers)
                    lines.seen("priority_to_buffer", n, what)
        elif m := _TC.match(line):
            number = lines.ints(n, "tc", m[1], 0, PRIORITIES - 1, 1, "a TC from 0 to 7")
            section = ("tc", number[0]) if number else None
            if number and (t := _TSA.search(m[2])):
                if t[1].lower() in TSAS:
                    tsa[number[0]] = t[1].lower()
                    lines.seen(f"tsa.{number[0]}", n, f"tc: {number[0]} tsa")
                else:
                    lines.bad(n, f"tc: {number[0]} tsa", t[1], " or ".join(TSAS))
            if number and (b := _BW.search(m[2])):
                bw[number[0]] = int(b[1])
        elif isinstance(section, tuple) and (m := _TC_PRIORITY.match(line)):
            tc = section[1]
            for prio in lines.ints(n, f"tc: {tc} priority", m[1], 0, PRIORITIES - 1) or ():
                if prio in priority_to_tc and priority_to_tc[prio] != tc:
                    lines.bad(n, f"tc: {tc} priority", str(prio),
                              f"each priority in one TC (it is already in TC {priority_to_tc[prio]})")
                priority_to_tc[prio] = tc
                lines.seen(f"priority_to_tc.{prio}", n, f"tc: {tc} priority")
                last_tc_line = n
    if dscp_to_priority:
        missing = [d for d in range(DSCP_VALUES) if d not in dscp_to_priority]
        if missing:
            lines.problems.add(f"line {dscp2prio_line} (dscp2prio mapping)",
                               f"gives no priority for DSCP {', '.join(map(str, missing[:8]))}"
                               + (" …" if len(missing) > 8 else ""),
                               "every DSCP 0–63 once, as mlnx_qos prints it")
        values["dscp_to_priority"] = tuple(dscp_to_priority.get(d, 0) for d in range(DSCP_VALUES))
    if priority_to_tc:
        missing = [p for p in range(PRIORITIES) if p not in priority_to_tc]
        if missing:
            lines.problems.add(f"line {last_tc_line} (tc: … priority)",
                               f"no TC block lists priority {', '.join(map(str, missing))}",
                               "every priority 0–7 under one `tc: N` line, as mlnx_qos prints it")
        values["priority_to_tc"] = tuple(priority_to_tc.get(p, 0) for p in range(PRIORITIES))
    if tsa:
        values["tsa"] = tsa
    if bw:
        values["bw_percent"] = bw
    if not values and not lines.problems.items:
        lines.problems.add("", "holds no line of `mlnx_qos -i IFACE` output",
                           "save what `mlnx_qos -i IFACE` prints (Priority trust state, "
                           "PFC configuration, tc: …)")
    lines.problems.raise_if_any()
    return HostNicConfig(**values, where=lines.where)


# ---------------------------------------------------------------- sysfs, configfs, ip link

_ECN = re.compile(r"^/sys/class/net/([^/\s]+)/ecn/(roce_np|roce_rp)/(?:params/)?"
                  r"(enable/)?([A-Za-z0-9_]+)=(.*)$")
_TOS = re.compile(r"^/sys/kernel/config/rdma_cm/([^/\s]+)/ports/(\d+)/default_roce_tos=(.*)$")
_LINK = re.compile(r"^\d+:\s+([^:\s]+)(?:@\S+)?:\s+<[^>]*>(.*)$")
_MTU = re.compile(r"\bmtu\s+(\S+)")


def read_nic_sysfs(text: str, file: str) -> HostNicConfig:
    """DCQCN's sysfs values, RoCE's ToS and the MTU from COLLECT's output (module
    docstring). InputError naming the file, line and field of every line that does not parse."""
    lines = _Lines(file)
    params: dict[str, dict[str, int]] = {"roce_rp": {}, "roce_np": {}}
    enabled: dict[str, set[int]] = {"roce_rp": set(), "roce_np": set()}
    given_enable: set[str] = set()
    values: dict = {}
    in_link = False
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if in_link and raw[:1].isspace():
            continue  # ip link's link/ether and altname lines
        in_link = False
        if m := _ECN.match(line):
            point, enable, name, value = m[2], m[3], m[4], m[5]
            if enable:
                what = f"{point}/enable/{name}"
                prio = lines.ints(n, what, name, 0, PRIORITIES - 1, 1, "a priority 0 to 7")
                flag = lines.ints(n, what, value, 0, 1, 1, "0 or 1")
                if prio and flag:
                    given_enable.add(point)
                    if flag[0]:
                        enabled[point].add(prio[0])
                    lines.seen(f"{point}.enable.{prio[0]}", n, what)
                continue
            number = lines.ints(n, f"{point}/{name}", value, 0, 2**32 - 1, 1,
                                "a whole number (cat printed nothing or text)")
            if number:
                params[point][name] = number[0]
                lines.seen(f"{point}.{name}", n, f"{point}/{name}")
        elif m := _TOS.match(line):
            if m[3].strip() == "":
                # configfs has no rdma_cm entry for DEV: cma_roce_tos never ran, ToS 0.
                values["roce_tos"] = 0
                lines.seen("roce_tos", n, f"rdma_cm/{m[1]} default_roce_tos, not set")
            elif tos := lines.ints(n, "default_roce_tos", m[3], 0, 255, 1, "a ToS from 0 to 255"):
                values["roce_tos"] = tos[0]
                lines.seen("roce_tos", n, f"rdma_cm/{m[1]} default_roce_tos")
        elif m := _LINK.match(line):
            in_link = True
            mtu = _MTU.search(m[2])
            if mtu is None:
                lines.bad(n, "ip link mtu", line, f"`mtu N` in ip link's line for {m[1]}")
            elif parsed := lines.ints(n, "ip link mtu", mtu[1], 68, 65535, 1, "an MTU from 68 to 65535"):
                values["mtu_bytes"] = parsed[0]
                lines.seen("mtu_bytes", n, f"ip link {m[1]} mtu")
        else:
            lines.problems.add(f"line {n}", f"{line[:60]!r} is not a line of the collection "
                                            "command's output",
                               "PATH=VALUE lines for the ecn and rdma_cm files, then "
                               "`ip link show IFACE` (docs/hosts.md)")
    for point, key, enable_key in (("roce_rp", "dcqcn_rp", "rp_enabled"),
                                   ("roce_np", "dcqcn_np", "np_enabled")):
        if params[point]:
            values[key] = params[point]
        if point in given_enable:
            values[enable_key] = frozenset(enabled[point])
    if not values and not lines.problems.items:
        lines.problems.add("", "holds none of the values the collection command prints",
                           f"save what this prints on the host: {COLLECT}")
    lines.problems.raise_if_any()
    return HostNicConfig(**values, where=lines.where)


# ---------------------------------------------------------------- a running NIC's settings

_SETS = ("pfc_priorities", "rp_enabled", "np_enabled")
_TUPLES = ("dscp_to_priority", "buffer_sizes_bytes", "priority_to_buffer", "priority_to_tc")
_BY_TC = ("tsa", "bw_percent")


def nic_to_json(config: HostNicConfig) -> dict:
    """A HostNicConfig as JSON (a host node keeps its running NIC so); `where` is left out."""
    out: dict = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if f.name == "where" or value is None:
            continue
        out[f.name] = sorted(value) if f.name in _SETS else list(value) if f.name in _TUPLES else \
            {str(k): v for k, v in value.items()} if isinstance(value, Mapping) else value
    return out


def nic_from_json(data: Mapping) -> HostNicConfig:
    values: dict = {}
    for name, value in data.items():
        values[name] = frozenset(value) if name in _SETS else tuple(value) if name in _TUPLES else \
            {int(k): v for k, v in value.items()} if name in _BY_TC else value
    return HostNicConfig(**values)


def sysfs_setting(path: str, value: str) -> tuple[str, str | int, int]:
    """What writing `value` to a ConnectX file sets: ("roce_rp"|"roce_np", NAME, number),
    ("roce_rp.enable"|"roce_np.enable", priority, 0|1) or ("roce_tos", "", ToS).
    ValueError naming the path and what it takes."""
    m, text = _ECN.match(f"{path}={value}"), value.strip()
    if m and m[3]:
        if not (m[4].isdigit() and int(m[4]) < PRIORITIES and text in ("0", "1")):
            raise ValueError(f"{path}: takes 0 or 1, for a priority 0 to 7")
        return f"{m[2]}.enable", int(m[4]), int(text)
    if m:
        if not text.isdigit() or int(text) >= 2**32:
            raise ValueError(f"{path}: {value!r} is not a whole number")
        return m[2], m[4], int(text)
    if _TOS.match(f"{path}={value}"):
        if not text.isdigit() or int(text) > 255:
            raise ValueError(f"{path}: {value!r} is not a ToS from 0 to 255")
        return "roce_tos", "", int(text)
    raise ValueError(f"{path}: no such file (the NIC's knobs: …/ecn/roce_rp/NAME, …/ecn/roce_np/NAME, their "
                     "enable/P, and /sys/kernel/config/rdma_cm/DEV/ports/1/default_roce_tos)")
