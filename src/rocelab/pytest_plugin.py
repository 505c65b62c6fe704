"""rocelab's pytest plugin: regression-test a fabric's QoS config before production.

Installed as the pytest11 entry point `rocelab`, so any pytest in an environment with
rocelab has it. It does nothing until given a fabric description (`rocelab.fabric_spec`):

    pytest --fabric examples/fabric-good            # a directory holding fabric.yml
    pytest --fabric fabric.yml --junitxml=qos.xml   # or the YAML file itself

- Static checks (`rocelab.lint`): one test item per check and switch, named like
  `fabric.yml::headroom[leaf1]` and marked `rocelab_static`, collected whenever --fabric is
  given: no test files are needed. A failing item lists its findings (device, port,
  priority, configured and required values, file and table/key or line), without a
  traceback. Select with `-m rocelab_static`, `-k headroom`, `-k leaf1`.
- Marker `rocelab_dynamic` is registered for the checks that run the description in a lab
  (root), so `-m "not rocelab_dynamic"` keeps a CI job without root static.
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
    from rocelab.fabric_spec import FabricSpec
    from rocelab.lint import Check, Finding

FABRIC_SPEC = pytest.StashKey["FabricSpec"]()
_FABRIC_FILE = pytest.StashKey[Path]()


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
    from rocelab.fabric_spec import fabric_file, load_fabric_spec

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


class FindingsFailed(Exception):
    def __init__(self, findings: list[Finding]):
        super().__init__(f"{len(findings)} findings")
        self.findings = findings


class FabricDescription(pytest.File):
    """The fabric.yml: collects one StaticCheck per check and switch."""

    def collect(self):
        from rocelab.lint import builtin_checks

        spec = self.config.stash[FABRIC_SPEC]
        checks = builtin_checks()
        for name in checks:
            for device in spec.devices:
                yield StaticCheck.from_parent(self, name=f"{name}[{device}]",
                                              check=checks.get(name), device=device)


class StaticCheck(pytest.Item):
    def __init__(self, *, check: Check, device: str, **kwargs):
        super().__init__(**kwargs)
        self.check = check
        self.device = device
        self.add_marker(pytest.mark.rocelab_static)
        self.user_properties += [("check", check.name), ("device", device)]

    def runtest(self) -> None:
        spec = self.config.stash[FABRIC_SPEC]
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
