"""Pattern files (traffic/*.yml) and the job spec they and the command line make.

A pattern file names a pattern and how to run it:

    pattern: ring-allreduce     # one of builtin_patterns()
    hosts: all                  # or a list: [h1, h2, h3, h4]
    size: 16MB                  # the nccl-tests size (per-rank buffer; per sender for incast)
    iterations: 5
    compute_gap: 1ms            # production time between syncs (× TDF in the lab)
    qps: 1                      # QPs per peer, each with its own UDP source port
    message_size: 1MiB          # largest message a transfer is cut into
    verb: send                  # send | write (WRITE + an empty SEND as notification) | read (receiver pulls)
    options: {root: h4}         # the pattern's own options
    stall_timeout: 20s          # fail if nothing moves for this long (wall time)

Every problem is collected and reported once, naming the file, the key and its line
(STYLE.md 3).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from rocelab import paths
from rocelab.errors import InputError, Problem, Problems
from rocelab.registry import Registry, UnknownName
from rocelab.traffic.patterns import Pattern
from rocelab.traffic.runner import VERBS
from rocelab.units import parse_bytes, parse_delay
from rocelab.yamlfile import at as _at
from rocelab.yamlfile import load_yaml

SPEC_KEYS = ("description", "pattern", "hosts", "size", "iterations", "compute_gap", "qps", "message_size",
             "verb", "options", "stall_timeout")
MAX_QPS = 64


@dataclass(frozen=True)
class JobSpec:
    pattern: str
    source: str = "command line"  # the pattern file, for error messages
    hosts: tuple[str, ...] = ()  # empty: every host of the lab
    size_bytes: int = 16_000_000
    iterations: int = 3
    compute_gap_s: float = 0.0  # production time
    qps: int = 1
    message_bytes: int = 1 << 20
    verb: str = "send"
    # verb read: READs each QP keeps outstanding (ibv_qp_attr.max_rd_atomic, perftest's -o); None: the NIC's.
    outstanding_reads: int | None = None
    options: Mapping[str, object] = field(default_factory=dict)
    stall_timeout_s: float = 20.0  # wall time


def traffic_dir() -> Path:
    return paths.project_root() / "traffic"


def pattern_files() -> list[str]:
    return sorted(p.stem for p in traffic_dir().glob("*.yml"))


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def load_spec(path: Path, patterns: Registry[Pattern]) -> JobSpec:
    """A pattern file → JobSpec, or InputError with every problem in it."""
    doc = load_yaml(path)
    problems = Problems(doc.name)
    data = doc.data
    if not isinstance(data, dict):
        problems.add("", "is not a pattern file: expected a mapping with at least `pattern`",
                     f"patterns: {', '.join(patterns.names())}")
        problems.raise_if_any()
    for key in data:
        if key not in SPEC_KEYS:
            problems.add(_at(doc, str(key)), f"unknown key {key!r}", f"expected one of: {', '.join(SPEC_KEYS)}")
    values: dict = {}
    pattern = None
    if "pattern" not in data:
        problems.add("pattern", "is missing", f"one of: {', '.join(patterns.names())}")
    else:
        try:
            pattern = patterns.get(str(data["pattern"]))
            values["pattern"] = pattern.name
        except UnknownName as exc:
            problems.add(_at(doc, "pattern"), str(exc))
    hosts = data.get("hosts", "all")
    if hosts != "all":
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
            problems.add(_at(doc, "hosts"), f"{hosts!r} is not a list of host names", "write hosts: all, or [h1, h2]")
        else:
            values["hosts"] = tuple(hosts)
    for key, attr, parse, expected in (("size", "size_bytes", parse_bytes, "a size like 4MB or 64MiB"),
                                       ("message_size", "message_bytes", parse_bytes, "a size like 1MiB"),
                                       ("compute_gap", "compute_gap_s", parse_delay, "a duration like 0, 500us or 2ms"),
                                       ("stall_timeout", "stall_timeout_s", parse_delay, "a duration like 20s")):
        if key in data:
            try:
                values[attr] = parse(data[key])
            except ValueError as exc:
                problems.add(_at(doc, key), str(exc), expected)
    for key, attr in (("iterations", "iterations"), ("qps", "qps")):
        if key in data:
            number = _positive_int(data[key])
            if number is None or (key == "qps" and number > MAX_QPS):
                problems.add(_at(doc, key), f"{data[key]!r} is not a count",
                             f"a whole number from 1{f' to {MAX_QPS}' if key == 'qps' else ''}")
            else:
                values[attr] = number
    if "verb" in data:
        if data["verb"] not in VERBS:
            problems.add(_at(doc, "verb"), f"{data['verb']!r} is not a verb", f"expected one of: {', '.join(VERBS)}")
        else:
            values["verb"] = data["verb"]
    options = data.get("options", {})
    if not isinstance(options, dict):
        problems.add(_at(doc, "options"), f"{options!r} is not a mapping of pattern options")
    elif pattern is not None:
        for key in options:
            if key not in pattern.options:
                problems.add(_at(doc, "options", str(key)), f"{pattern.name} has no option {key!r}",
                             f"options: {', '.join(pattern.options) or 'none'}")
        values["options"] = dict(options)
    if values.get("message_bytes") == 0:
        problems.add(_at(doc, "message_size"), "must be at least 1 byte")
    problems.raise_if_any()
    return JobSpec(source=doc.name, **values)


def resolve_spec(ref: str, patterns: Registry[Pattern]) -> JobSpec:
    """A pattern file (a path, or a name under traffic/) or a bare pattern name."""
    for candidate in (Path(ref), traffic_dir() / ref, traffic_dir() / f"{ref}.yml"):
        if candidate.is_file():
            return load_spec(candidate, patterns)
    if ref in patterns.names():
        return JobSpec(pattern=ref)
    raise InputError([Problem(ref, "", "is neither a pattern file nor a pattern",
                              f"files under traffic/: {', '.join(pattern_files()) or 'none'}; "
                              f"patterns: {', '.join(patterns.names())}")])


def with_overrides(spec: JobSpec, *, hosts: str | None = None, size: str | None = None,
                   iterations: int | None = None, qps: int | None = None) -> JobSpec:
    """The spec with the command line's --hosts, --size, --iters, --qps on top."""
    problems = Problems("command line")
    changes: dict = {}
    if hosts:
        changes["hosts"] = tuple(h.strip() for h in hosts.split(",") if h.strip())
    if size:
        try:
            changes["size_bytes"] = parse_bytes(size)
        except ValueError as exc:
            problems.add("--size", str(exc), "a size like 4MB or 64MiB")
    if iterations is not None:
        if iterations < 1:
            problems.add("--iters", f"{iterations} is not a count", "a whole number ≥ 1")
        changes["iterations"] = iterations
    if qps is not None:
        if not 1 <= qps <= MAX_QPS:
            problems.add("--qps", f"{qps} is not a QP count", f"a whole number from 1 to {MAX_QPS}")
        changes["qps"] = qps
    problems.raise_if_any()
    return dataclasses.replace(spec, **changes)
