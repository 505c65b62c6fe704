"""Pattern files, the job spec, the report and the traffic/bw front door without root."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from rocelab.errors import InputError
from rocelab.engines.state import InterfaceState, LabState, NodeState
from rocelab.traffic.job import bw_summary, make_plan, run_job
from rocelab.traffic.patterns import builtin_patterns
from rocelab.reporting.traffic import render_bw, render_report
from rocelab.traffic.sim import run_in_sim
from rocelab.traffic.spec import JobSpec, load_spec, resolve_spec, traffic_dir, with_overrides

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "rocelab"]
PATTERNS = builtin_patterns()
SHIPPED = sorted((ROOT / "traffic").glob("*.yml"))

# Bad pattern files beside the message each must produce (file, YAML path and line, expectation).
BAD_FILES = {
    "unknown-key": ("pattern: ring-allreduce\nsizes: 4MB\n",
                    ["sizes (line 2): unknown key 'sizes'", "expected one of: description, pattern"]),
    "missing-pattern": ("size: 4MB\n", ["pattern: is missing", "ring-allreduce"]),
    "unknown-pattern": ("pattern: butterfly\n",
                        ["pattern (line 1): unknown traffic pattern 'butterfly'", "halving-doubling"]),
    "bad-size": ("pattern: alltoall\nsize: lots\n", ["size (line 2): 'lots' is not a size", "4MB"]),
    "bad-counts": ("pattern: alltoall\niterations: 0\nqps: 100\n",
                   ["iterations (line 2): 0 is not a count", "qps (line 3): 100 is not a count", "1 to 64"]),
    "bad-verb": ("pattern: alltoall\nverb: atomic\n", ["verb (line 2): 'atomic' is not a verb", "send, write, read"]),
    "bad-option": ("pattern: ring-allreduce\noptions: {root: h1}\n",
                   ["options.root (line 2): ring-allreduce has no option 'root'"]),
    "bad-hosts": ("pattern: incast\nhosts: h1 h2\n", ["hosts (line 2): 'h1 h2' is not a list of host names"]),
    "bad-gap": ("pattern: incast\ncompute_gap: soon\n", ["compute_gap (line 2): 'soon' is not a delay"]),
    "not-a-mapping": ("- ring-allreduce\n", ["is not a pattern file"]),
}


def lab_record(tmp_path: Path, hosts=("h1", "h2", "h3"), nic: str | None = None) -> LabState:
    source = tmp_path / "labs" / "x" / "lab.yml"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(f"topology: leaf-spine-2x2\n{f'nic: {nic}' if nic else ''}\n")
    nodes = [NodeState(h, "host", f"x.{h}", [InterfaceState("eth1", f"198.19.{n}.2/24", "leaf1:eth1", "02:00:00:00:00:01")])
             for n, h in enumerate(hosts, start=1)]
    return LabState("x", "netns", str(source), "kernel", 1000, "up", nodes)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_pattern_files_load_and_plan(path):
    spec = load_spec(path, PATTERNS)
    hosts = spec.hosts or ("h1", "h2", "h3", "h4")
    plan = PATTERNS.get(spec.pattern).plan(hosts, spec.size_bytes, spec.options)
    assert sum(plan.bytes_sent(h) for h in plan.hosts) > 0


def test_every_pattern_has_a_file():
    assert {load_spec(p, PATTERNS).pattern for p in SHIPPED} == set(PATTERNS.names())


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_pattern_files_name_file_path_line_and_expectation(tmp_path, case):
    text, expected = BAD_FILES[case]
    path = tmp_path / f"{case}.yml"
    path.write_text(text)
    with pytest.raises(InputError) as exc:
        load_spec(path, PATTERNS)
    message = str(exc.value)
    assert f"{case}.yml" in message
    for part in expected:
        assert part in message


def test_a_file_with_many_problems_reports_them_all_at_once(tmp_path):
    path = tmp_path / "many.yml"
    path.write_text("pattern: alltoall\nsize: x\niterations: -1\nverb: atomic\n")
    with pytest.raises(InputError) as exc:
        load_spec(path, PATTERNS)
    assert len(exc.value.problems) == 3


def test_resolve_takes_a_file_a_name_under_traffic_or_a_bare_pattern(tmp_path):
    assert resolve_spec("ring-allreduce", PATTERNS).source.endswith("ring-allreduce.yml")
    assert resolve_spec(str(SHIPPED[0]), PATTERNS).pattern
    own = tmp_path / "mine.yml"
    own.write_text("pattern: elephant\nhosts: [h1, h2]\nsize: 1MB\n")
    assert resolve_spec(str(own), PATTERNS).hosts == ("h1", "h2")
    assert traffic_dir() == ROOT / "traffic"
    with pytest.raises(InputError) as exc:
        resolve_spec("nope", PATTERNS)
    assert "incast-4to1" in str(exc.value) and "halving-doubling" in str(exc.value)


def test_command_line_overrides_are_validated():
    spec = with_overrides(JobSpec("ring-allreduce"), hosts="h1, h2", size="2MiB", iterations=4, qps=2)
    assert (spec.hosts, spec.size_bytes, spec.iterations, spec.qps) == (("h1", "h2"), 2 << 20, 4, 2)
    with pytest.raises(InputError) as exc:
        with_overrides(JobSpec("ring-allreduce"), size="big", qps=99)
    assert "--size" in str(exc.value) and "--qps" in str(exc.value)


def test_plan_names_unknown_hosts_and_pattern_limits(tmp_path):
    record = lab_record(tmp_path)
    with pytest.raises(InputError) as exc:
        make_plan(record, JobSpec("ring-allreduce", hosts=("h1", "h9")))
    assert "--hosts: h9 is not a host of x" in str(exc.value) and "h1, h2, h3" in str(exc.value)
    with pytest.raises(InputError, match="power-of-two"):
        make_plan(record, JobSpec("halving-doubling"))
    assert make_plan(record, JobSpec("ring-allreduce")).hosts == ("h1", "h2", "h3")


def test_a_lab_without_nics_is_refused_with_the_fix(tmp_path):
    record = lab_record(tmp_path)
    assert record.nic == "none"
    with pytest.raises(InputError) as exc:
        run_job(record, JobSpec("ring-allreduce"))
    assert "nic: emulated" in str(exc.value)


def test_report_tables_render_production_and_emulated_units():
    plan = PATTERNS.get("elephant").plan(["h1", "h2"], 1_000_000)
    report, _, _ = run_in_sim(plan, rate_bps=100e6)
    out = io.StringIO()
    Console(file=out, width=200).print(render_report(report))
    text = out.getvalue()
    assert "TDF 1000" in text and "Gb/s" in text and "Mb/s emulated" in text
    # bw's columns from a sender that completed one 64 KiB message every 10 ms
    summary = bw_summary(report, {"messages": [[report["per_iteration"][0]["start_s"] + 0.01 * (k + 1), 65536, 1]
                                               for k in range(10)]}, 65536)
    assert summary["bw_average_bps"]["emulated"] == pytest.approx(8 * 65536 / 0.01)
    assert summary["bw_peak_bps"]["production"] == pytest.approx(summary["bw_peak_bps"]["emulated"] * 1000)
    assert summary["msg_rate_pps"]["emulated"] == pytest.approx(100)
    out = io.StringIO()
    Console(file=out, width=200).print(render_bw({"src": "h1", "dst": "h2", **summary}))
    assert "65,536" in out.getvalue() and "MsgRate" in out.getvalue()


def test_traffic_with_a_bad_file_exits_2_naming_it_before_looking_for_a_lab(tmp_path):
    path = tmp_path / "broken.yml"
    path.write_text(textwrap.dedent("""\
        pattern: ring-allreduce
        size: huge
    """))
    result = subprocess.run([*CLI, "traffic", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert "broken.yml: size (line 2)" in result.stderr and "Traceback" not in result.stderr
    result = subprocess.run([*CLI, "traffic", "butterfly"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and "ring-allreduce" in result.stderr


def test_bw_with_bad_options_exits_2():
    result = subprocess.run([*CLI, "bw", "h1", "h2", "--size", "lots", "--qps", "0", "--verb", "send"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert "--size" in result.stderr and "--qps" in result.stderr and "Traceback" not in result.stderr
    assert "--verb: 'send' is not a verb bw measures" in result.stderr
