"""rocelab's pytest plugin: regression-test a fabric's QoS config before production.

Installed as the pytest11 entry point `rocelab`, so any pytest in an environment with
rocelab has it. It does nothing until given a fabric description (`rocelab.fabric.spec`):

    pytest --fabric examples/fabric-good            # a directory holding fabric.yml
    pytest --fabric fabric.yml --junitxml=qos.xml   # or the YAML file itself

- Static checks (`rocelab.fabric.lint`, BGP's in `rocelab.fabric.bgplint`): one test item per check and switch, named like
  `fabric.yml::headroom[leaf1]` and marked `rocelab_static`, collected whenever --fabric is
  given: no test files are needed. A failing item lists its findings (device, port,
  priority, configured and required values, file and table/key or line), without a
  traceback. Select with `-m rocelab_static`, `-k headroom`, `-k leaf1`.
- Dynamic checks (`rocelab.fabric.lab`, root): the description brought up once per session
  as a netns lab (every switch with its own profile, every host with the
  description's RoCE settings): `pfc-threshold[SWITCH:pN]` per lossless priority, `incast-lossless`,
  `ecn-before-pfc`, `allreduce-budget`; marked `rocelab_dynamic`, so
  `-m "not rocelab_dynamic"` keeps a CI job without root static. Without root they skip.
  Where every switch's file gives its BGP (rocelab.fabric.bgplint), the lab routes on FRR
  configured from those files, and `ecmp-width` asks that every leaf reach every other rack's
  hosts over one next hop per spine; elsewhere it is not applicable. A timed check
  (`incast-lossless`, `ecn-before-pfc`, `allreduce-budget`) that fails while the emulation fell
  behind (its fidelity line: the agents ran late, or a lossless PG dropped no more than their
  lateness accounts for) is skipped as inconclusive, that line its reason: neither passed nor a
  fault of the fabric.
- Fixtures for users' own tests: `fabric_spec` (session scope), the loaded FabricSpec; it
  skips a test when --fabric is not given. Fixtures that need a running lab build on it, in
  this order: fabric_spec → fabric (a lab up from the description, torn down at the end) →
  traffic, probe, counters.
- A description that cannot be read or is malformed stops pytest before collection with a
  usage error listing every problem (file, path or line, what was expected) and exit
  status 4, pytest's own usage-error status (ExitCode.USAGE_ERROR).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# pytest loads this plugin before any conftest.py runs, and rocelab.paths reads
# ROCELAB_STATE_DIR when first imported: import rocelab's modules only when --fabric is used.
if TYPE_CHECKING:
    from rocelab.fabric.spec import FabricSpec
    from rocelab.fabric.lint import Check, Finding

FABRIC_SPEC = pytest.StashKey["FabricSpec"]()
_FABRIC_FILE = pytest.StashKey[Path]()
_LAB = pytest.StashKey[object]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rocelab", "rocelab fabric checks")
    group.addoption("--fabric", metavar="DIR|FILE",
                    help="a fabric description (a directory with fabric.yml, or the YAML "
                         "file): run rocelab's static checks on it and give tests the "
                         "fabric_spec fixture")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rocelab_static: rocelab's static checks of the "
                                       "--fabric description (no root, no lab)")
    config.addinivalue_line("markers", "rocelab_dynamic: rocelab's checks that run the "
                                       "--fabric description in a lab (root)")
    given = config.getoption("fabric")
    if given is None:
        return
    from rocelab.errors import InputError
    from rocelab.fabric.spec import fabric_file, load_fabric_spec

    path = config.invocation_params.dir / given
    try:
        config.stash[FABRIC_SPEC] = load_fabric_spec(path)
    except InputError as e:
        raise pytest.UsageError(f"--fabric {given}: the fabric description has problems:\n"
                                f"{e}") from None
    config.stash[_FABRIC_FILE] = fabric_file(path).resolve()
    # Collected as if named on the command line, so no test files are needed.
    config.args.append(str(config.stash[_FABRIC_FILE]))


def pytest_report_header(config: pytest.Config) -> str | None:
    spec = config.stash.get(FABRIC_SPEC, None)
    if spec is None:
        return None
    devices = ", ".join(f"{d.name} ({d.format})" for d in spec.devices.values())
    return f"rocelab fabric: {spec.name} from {spec.source}: {devices}"


def reader_notes(spec) -> list[tuple[str, str]]:
    """(switch, note) for what each device's QoS and BGP readers warned about or ignored."""
    return [(d.name, note) for d in spec.devices.values()
            for note in (*d.profile.notes, *(d.bgp.notes if d.bgp else ()))]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """What the readers derived, warned about or could not check, per device: a gate's
    reader must see these next to the verdict, not dig for them."""
    spec = config.stash.get(FABRIC_SPEC, None)
    if spec is None:
        return
    noted = reader_notes(spec)
    if not noted:
        return
    terminalreporter.section("rocelab: what the configurations' readers derived, warned about or left unchecked")
    for device, note in noted:
        terminalreporter.write_line(f"{device}: {note}")


class FindingsFailed(Exception):
    def __init__(self, findings: list[Finding]):
        super().__init__(f"{len(findings)} findings")
        self.findings = findings


class FabricDescription(pytest.File):
    """The fabric.yml: one StaticCheck per check and switch, then the dynamic checks."""

    def collect(self):
        from rocelab.fabric import lab as fabric_lab
        from rocelab.fabric.lint import builtin_checks

        spec = self.config.stash[FABRIC_SPEC]
        checks = builtin_checks()
        for name in checks:
            for device in spec.devices:
                yield StaticCheck.from_parent(self, name=f"{name}[{device}]",
                                              check=checks.get(name), device=device)
        for probe in fabric_lab.threshold_probes(spec):
            yield DynamicCheck.from_parent(self, name=probe.name, target=probe.switch,
                                           run=lambda s, r, probe=probe: fabric_lab.pfc_threshold(s, r, probe),
                                           summary="PFC fires at the profile's trigger; on a leaf the PG then "
                                                   "absorbs its xoff")
        yield DynamicCheck.from_parent(self, name="incast-lossless", target=None, run=fabric_lab.incast_lossless,
                                       summary="N:1 incast of RDMA writes with PFC alone: no drop")
        yield DynamicCheck.from_parent(self, name="ecn-before-pfc", target=None, run=fabric_lab.ecn_before_pfc,
                                       summary="under DCQCN the first CE mark comes before the first PFC frame")
        if spec.budgets.allreduce_step_time_s is not None:
            yield DynamicCheck.from_parent(self, name="allreduce-budget", target=None, run=fabric_lab.allreduce_budget,
                                           summary="a ring AllReduce step fits the description's budget")
        yield DynamicCheck.from_parent(self, name="ecmp-width", target=None, run=fabric_lab.ecmp_width,
                                       summary="on FRR, every leaf reaches every other rack over one next hop per spine",
                                       not_applicable=fabric_lab.without_bgp)


class DynamicFailed(Exception):
    def __init__(self, failures: list[str]):
        super().__init__(f"{len(failures)} failures")
        self.failures = failures


def _running_lab(config: pytest.Config):
    """The description up as a lab, once per session, torn down when pytest ends."""
    record = config.stash.get(_LAB, None)
    if record is None:
        import os
        import tempfile

        from rocelab.engines import builtin_engines
        from rocelab.fabric.lab import lab_from_spec
        from rocelab.runtime import calibration

        spec = config.stash[FABRIC_SPEC]
        engine = builtin_engines().get("netns")
        workdir = Path(tempfile.mkdtemp(prefix="rocelab-fabric-"))
        lab = lab_from_spec(spec, f"fab{os.getpid() % 100000}", workdir)
        record = calibration.up(engine, lab)
        config.stash[_LAB] = record
    return record


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Tear the description's lab down, whatever the checks did."""
    record = session.config.stash.get(_LAB, None)
    if record is not None:
        from rocelab.engines import builtin_engines

        builtin_engines().get("netns").down(record)
        session.config.stash[_LAB] = None


class DynamicCheck(pytest.Item):
    def __init__(self, *, target: str | None, run, summary: str, not_applicable=lambda spec: None, **kwargs):
        super().__init__(**kwargs)
        self.run = run
        self.summary = summary
        self.not_applicable = not_applicable  # spec → why there is nothing to run, or None
        self.add_marker(pytest.mark.rocelab_dynamic)
        self.user_properties += [("check", self.name.split("[")[0])] + ([("device", target)] if target else [])

    def runtest(self) -> None:
        import os

        reason = self.not_applicable(self.config.stash[FABRIC_SPEC])
        if reason:
            pytest.skip(f"not applicable: {reason}")
        if os.geteuid() != 0:
            pytest.skip("needs root: the dynamic checks run the fabric in network namespaces")
        from rocelab.fabric.lab import Inconclusive

        try:
            failures = self.run(self.config.stash[FABRIC_SPEC], _running_lab(self.config))
        except Inconclusive as exc:
            pytest.skip(f"inconclusive: {exc}")
        if failures:
            raise DynamicFailed(failures)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, DynamicFailed):
            failures = excinfo.value.failures
            return "\n".join([f"{self.name}: {self.summary} — {len(failures)} failure{'s' if len(failures) != 1 else ''}",
                              *failures])
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.name}: {self.summary}"


class StaticCheck(pytest.Item):
    def __init__(self, *, check: Check, device: str, **kwargs):
        super().__init__(**kwargs)
        self.check = check
        self.device = device
        self.add_marker(pytest.mark.rocelab_static)
        self.user_properties += [("check", check.name), ("device", device)]

    def runtest(self) -> None:
        spec = self.config.stash[FABRIC_SPEC]
        reason = self.check.not_applicable(spec, spec.devices[self.device])
        if reason:
            pytest.skip(f"not applicable: {reason}")
        findings = self.check.run(spec, spec.devices[self.device])
        if findings:
            raise FindingsFailed(findings)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, FindingsFailed):
            findings = excinfo.value.findings
            device = self.config.stash[FABRIC_SPEC].devices[self.device]
            head = (f"{self.check.name} on {self.device} ({device.file}): {self.check.summary}"
                    f" — {len(findings)} finding{'s' if len(findings) != 1 else ''}")
            return "\n".join([head, *(str(f) for f in findings)])
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.name}: {self.check.summary}"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> FabricDescription | None:
    """The --fabric description's file, and no other, is a FabricDescription."""
    if file_path == parent.config.stash.get(_FABRIC_FILE, None):
        return FabricDescription.from_parent(parent, path=file_path)
    return None


@pytest.fixture(scope="session")
def fabric_spec(pytestconfig: pytest.Config) -> FabricSpec:
    """The fabric description given with --fabric."""
    spec = pytestconfig.stash.get(FABRIC_SPEC, None)
    if spec is None:
        pytest.skip("no fabric description: run pytest with --fabric DIR|FILE")
    return spec


@pytest.fixture(scope="session")
def fabric(pytestconfig: pytest.Config, fabric_spec: FabricSpec):
    """The description up as a netns lab (every switch with its own profile, every host with
    its own NIC settings): a rocelab.engines.state.LabState. Needs root; torn down when the session ends."""
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root: the fabric runs in network namespaces")
    return _running_lab(pytestconfig)


@pytest.fixture
def counters(fabric):
    """counters(NODE) → that switchd's or nicd's counters, as `invoke show counters --json`."""
    from rocelab.kernel import control

    return lambda node: control.request(control.socket_path(fabric.name, node), "counters")["counters"]


@pytest.fixture
def traffic(fabric):
    """traffic(PATTERN, hosts=…, size_bytes=…, iterations=…, options=…) → the job report."""
    from rocelab.traffic.job import run_job
    from rocelab.traffic.spec import JobSpec

    return lambda pattern, **fields: run_job(fabric, JobSpec(pattern=pattern, **fields))[0]


@pytest.fixture
def probe(fabric):
    """probe(NODE, IFACE) → a started rocelab.probes.Probe; `.stop()` gives its report.
    Probes still running when the test ends are stopped."""
    from rocelab.probes import Probe

    started = []

    def attach(node: str, iface: str):
        started.append(Probe(fabric.node(node).netns, iface).start())
        return started[-1]

    yield attach
    for p in started:
        if p.report is None:
            p.stop()
