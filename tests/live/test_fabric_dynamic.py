"""The pytest plugin's dynamic checks: the fabric description run as a lab (root)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rocelab.fabric.lint import builtin_checks

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.root
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DYNAMIC = ("pfc-threshold[spine1:p3]", "pfc-threshold[spine2:p3]", "pfc-threshold[leaf1:p3]", "pfc-threshold[leaf2:p3]",
           "incast-lossless", "ecn-before-pfc", "allreduce-budget")
NOT_APPLICABLE = ("ecmp-width",)  # fabric-good's files give no BGP
STATIC = len(builtin_checks().names()) * 4  # each static check on each of the examples' four switches
NOT_PFC_THRESHOLD = STATIC + len(DYNAMIC) + len(NOT_APPLICABLE) - 4  # what `-k pfc-threshold` deselects


@pytest.fixture
def fabrics(pytester: pytest.Pytester) -> Path:
    for name in ("fabric-good", "fabric-broken"):
        shutil.copytree(EXAMPLES / name, pytester.path / name)
    return pytester.path


def test_the_good_fabric_passes_every_dynamic_check(pytester: pytest.Pytester, fabrics: Path):
    result = pytester.runpytest_subprocess("--fabric", "fabric-good", "-m", "rocelab_dynamic", "-v", "-rs")
    inconclusive = [line for line in result.stdout.lines if "inconclusive: fidelity:" in line]
    if inconclusive:
        pytest.skip(f"a timed check ran while the agents fell behind: {inconclusive}")
    result.assert_outcomes(passed=len(DYNAMIC), skipped=len(NOT_APPLICABLE), deselected=STATIC)
    for name in DYNAMIC:
        assert f"::{name} PASSED" in result.stdout.str()


def test_a_lossy_map_fails_the_pfc_threshold_probe_and_leaves_nothing_up(pytester: pytest.Pytester, fabrics: Path):
    result = pytester.runpytest_subprocess("--fabric", "fabric-broken", "-m", "rocelab_dynamic", "-k",
                                           "pfc-threshold")
    result.assert_outcomes(passed=3, failed=1, deselected=NOT_PFC_THRESHOLD)
    result.stdout.fnmatch_lines(["*leaf2 eth1: DSCP 26 lands in PG0, which is not lossless*"])
    netns = Path("/run/netns")
    assert not [p for p in netns.iterdir() if p.name.startswith("fab")] if netns.is_dir() else True


def test_users_own_tests_get_a_running_fabric(pytester: pytest.Pytester, fabrics: Path):
    pytester.makepyfile(test_mine="""
        def test_an_elephant_crosses_the_fabric(fabric, traffic, counters, probe):
            watch = probe("leaf1", "eth1")
            report = traffic("elephant", hosts=("h1", "h4"), size_bytes=500_000, iterations=1)
            seen = watch.stop()
            assert report["ranks"]["h4"]["bytes_received"] == 500_000
            assert counters("leaf1")["ports"]["eth1"]["rx_bytes"] > 500_000
            assert seen.totals["frames"] > 100
        """)
    result = pytester.runpytest_subprocess("--fabric", "fabric-good", "-m", "not rocelab_static and not rocelab_dynamic",
                                           "test_mine.py")
    result.assert_outcomes(passed=1, deselected=STATIC + len(DYNAMIC) + len(NOT_APPLICABLE))


def test_a_spine_that_pauses_the_wrong_queue_fails_its_probe(pytester: pytest.Pytester, fabrics: Path):
    # spine2 maps PFC priority 3 to queue 4: leaf2's XOFF stops the wrong queue, so spine2
    # never holds the RoCE frames and never pauses leaf1 (the static roce-lossless check
    # reads the same defect from the file; this is the fabric showing it).
    config = fabrics / "fabric-good" / "spine2" / "config_db.json"
    doc = json.loads(config.read_text())
    doc["MAP_PFC_PRIORITY_TO_QUEUE"]["ROCE"]["3"] = "4"
    config.write_text(json.dumps(doc, indent=4))
    result = pytester.runpytest_subprocess("--fabric", "fabric-good", "-m", "rocelab_dynamic", "-k", "pfc-threshold")
    result.assert_outcomes(passed=3, failed=1, deselected=NOT_PFC_THRESHOLD)
    result.stdout.fnmatch_lines(["*spine2 Ethernet0 (eth1) priority 3 (PG3, BUFFER_PROFILE *): no PFC after *"
                                 "expected XOFF at 381,300 B*"])


def test_cumulus_leaves_run_the_profile_nvue_derives(pytester: pytest.Pytester):
    # examples/fabric-cumulus: switchd on leaf1 and leaf2 runs what `nv set qos roce` (and the
    # platform buffer figures) derive; XOFF must fire at the trigger that profile sets.
    shutil.copytree(EXAMPLES / "fabric-cumulus", pytester.path / "fabric-cumulus")
    result = pytester.runpytest_subprocess("--fabric", "fabric-cumulus", "-m", "rocelab_dynamic", "-v",
                                           "-k", "pfc-threshold and leaf")
    result.assert_outcomes(passed=2, deselected=NOT_PFC_THRESHOLD + 2)
    for leaf in ("leaf1", "leaf2"):
        assert f"::pfc-threshold[{leaf}:p3] PASSED" in result.stdout.str()


def test_ecmp_width_runs_frr_from_eos_spines_router_bgp(pytester: pytest.Pytester):
    # examples/fabric-bgp-eos: SONiC leaves, EOS spines (a peer group on spine1, neighbor by
    # neighbor and `redistribute connected` on spine2), each spine its own AS: FRR runs the
    # spines' `router bgp` as read from their running-configs, and every leaf spreads over both.
    shutil.copytree(EXAMPLES / "fabric-bgp-eos", pytester.path / "fabric-bgp-eos")
    result = pytester.runpytest_subprocess("--fabric", "fabric-bgp-eos", "-v", "-k", "ecmp-width")
    result.assert_outcomes(passed=1, deselected=STATIC + len(DYNAMIC) - 1)
    assert "::ecmp-width PASSED" in result.stdout.str()


def test_ecmp_width_on_frr_passes_the_bgp_fabric_and_fails_a_leaf_without_multipath_relax(pytester: pytest.Pytester):
    # examples/fabric-bgp runs on FRR configured from its own config_dbs: a private AS per spine,
    # so leaf1's two paths to leaf2's racks differ in AS path and need multipath-relax.
    shutil.copytree(EXAMPLES / "fabric-bgp", pytester.path / "fabric-bgp")
    result = pytester.runpytest_subprocess("--fabric", "fabric-bgp", "-v", "-k", "ecmp-width")
    everything_else = STATIC + len(DYNAMIC) - 1  # fabric-bgp sets no allreduce budget
    result.assert_outcomes(passed=1, deselected=everything_else)
    assert "::ecmp-width PASSED" in result.stdout.str()

    fabric = pytester.path / "fabric-bgp"
    constants = (fabric / "constants.yml").read_text()
    (fabric / "leaf1.constants.yml").write_text(constants.replace("    multipath_relax:\n      enabled: true\n", ""))
    fabric_yml = fabric / "fabric.yml"
    fabric_yml.write_text(fabric_yml.read_text().replace("leaf1/config_db.json, constants: constants.yml",
                                                         "leaf1/config_db.json, constants: leaf1.constants.yml"))
    result = pytester.runpytest_subprocess("--fabric", "fabric-bgp", "-k", "ecmp-width")
    result.assert_outcomes(failed=1, deselected=everything_else)
    result.stdout.fnmatch_lines(["leaf1: 198.19.3.0/24 (leaf2's rack) over 1 next hop, expected 2 (one per spine: "
                                 "spine1, spine2)"])
    # leaf2 keeps its multipath-relax: every narrow route found is leaf1's
    narrow = [line for line in result.stdout.lines if "next hop, expected" in line]
    assert narrow and all(line.lstrip().startswith("leaf1:") for line in narrow), narrow


def test_ecmp_width_runs_cumulus_unnumbered_bgp_on_frr_and_fails_a_leaf_without_aspath_ignore(
        pytester: pytest.Pytester):
    # examples/fabric-bgp-cumulus: every leaf-spine session unnumbered (`neighbor swpN`, IPv6
    # link-local, `remote-as external`): FRR peers on the ports' link-local addresses, and each
    # leaf forwards to the other's racks over one next hop per spine.
    shutil.copytree(EXAMPLES / "fabric-bgp-cumulus", pytester.path / "fabric-bgp-cumulus")
    everything_else = STATIC + len(DYNAMIC) - 1  # no allreduce budget
    result = pytester.runpytest_subprocess("--fabric", "fabric-bgp-cumulus", "-v", "-k", "ecmp-width")
    result.assert_outcomes(passed=1, deselected=everything_else)
    assert "::ecmp-width PASSED" in result.stdout.str()

    leaf1 = pytester.path / "fabric-bgp-cumulus" / "leaf1" / "nv-config.yml"
    leaf1.write_text(leaf1.read_text().replace("aspath-ignore: on", "aspath-ignore: off"))
    result = pytester.runpytest_subprocess("--fabric", "fabric-bgp-cumulus", "-k", "ecmp-width")
    result.assert_outcomes(failed=1, deselected=everything_else)
    result.stdout.fnmatch_lines(["leaf1: 198.19.3.0/24 (leaf2's rack) over 1 next hop, expected 2 (one per spine: "
                                 "spine1, spine2)"])
