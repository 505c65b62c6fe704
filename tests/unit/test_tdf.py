"""`up --tdf auto`: the TDF a lab's cases need on a machine with given per-rate agent costs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rocelab.model.lab import load_lab
from rocelab.model.tdf import (CALIBRATION_AGENTS, LATENESS_AGENTS_MAX, LATENESS_MARGIN, MAX_TDF, SAFE_FRACTION, AgentCosts,
                               choose_tdf, cores_at, demands, frame_bytes, latency_floor, pinned, round_up)

# Shaped like this project's calibration: cheap per frame when busy, dear when each frame wakes the agent.
SLOW = AgentCosts(switch=((500, 0.08), (2500, 0.2), (12000, 0.35)), nic=((500, 0.12), (2500, 0.37), (12000, 0.8)),
                  cores=2)
FAST = AgentCosts(switch=((500, 0.005), (2500, 0.025), (12000, 0.12)), nic=((500, 0.0125), (2500, 0.0625),
                  (12000, 0.3)), cores=2)
PMTU = 4096
LINE_RATE_FRAMES = 100e9 / PMTU / 8  # a 100G host's data frames per second at TDF 1


@pytest.mark.parametrize("value, expected", [(0.3, 1), (1, 1), (1.2, 2), (2.1, 3), (3, 3), (5, 5), (7, 8),
                                             (13, 15), (1001, 1250), (2000, 2000), (2001, 2500), (2600, 3000),
                                             (5100, 6000), (8001, 10000), (9999, 10000)])
def test_round_up_takes_the_next_step_of_the_dial(value, expected):
    assert round_up(value) == expected


def test_the_cost_curve_runs_through_zero_and_the_points_and_on_along_its_last_segment():
    curve = ((1000, 0.1), (3000, 0.2))
    assert cores_at(curve, 0) == 0 and cores_at(curve, 500) == pytest.approx(0.05)
    assert cores_at(curve, 2000) == pytest.approx(0.15) and cores_at(curve, 5000) == pytest.approx(0.3)
    assert cores_at(((1000, 0.2), (3000, 0.1)), 9000) == pytest.approx(0.1)  # a falling segment never goes below


def test_an_incast_asks_one_line_rate_of_the_receiver_and_a_quarter_of_each_sender():
    lab = load_lab("lab-pfc")
    pfc = next(d for d in demands(lab.fabric, lab.scenario, PMTU) if d.case == "pfc")
    assert pfc.hosts["h5"] == pytest.approx(LINE_RATE_FRAMES)
    assert all(pfc.hosts[h] == pytest.approx(LINE_RATE_FRAMES / 4) for h in ("h1", "h2", "h3", "h4"))
    assert pfc.switches == {"leaf1": pytest.approx(LINE_RATE_FRAMES)}


def test_a_ring_across_racks_crosses_both_leaves_and_spreads_over_the_spines():
    lab = load_lab("leaf-spine-2x2")
    (ring,) = demands(lab.fabric, None, PMTU)
    assert all(f == pytest.approx(2 * LINE_RATE_FRAMES) for f in ring.hosts.values())  # sends and receives
    # h1→h2 stays under leaf1, h2→h3 and h4→h1 cross: each leaf forwards three transfers, the spines two between them
    assert ring.switches["leaf1"] == pytest.approx(3 * LINE_RATE_FRAMES)
    assert ring.switches["spine1"] + ring.switches["spine2"] == pytest.approx(2 * LINE_RATE_FRAMES)


def test_the_chosen_tdf_fits_every_case_and_no_smaller_round_one_does():
    lab = load_lab("lab-pfc")
    cases = demands(lab.fabric, lab.scenario, PMTU)
    choice = choose_tdf(lab.fabric, lab.scenario, PMTU, SLOW)
    assert choice.how == "auto" and choice.load <= SAFE_FRACTION
    assert all(d.fits(SLOW, choice.tdf) for d in cases)
    smaller = sorted({round_up(t) for t in range(1, choice.tdf)} - {choice.tdf})
    assert smaller and not any(all(d.fits(SLOW, t) for d in cases) for t in smaller)
    assert "case " in choice.why and "frames/s" in choice.why


def test_a_slower_machine_gets_a_larger_tdf_and_a_floor_is_kept():
    fabric = load_lab("leaf-spine-2x2").fabric
    assert choose_tdf(fabric, None, PMTU, SLOW).tdf > choose_tdf(fabric, None, PMTU, FAST).tdf
    floored = choose_tdf(fabric, None, PMTU, FAST, floor=4000)
    assert floored.tdf == 4000 and "4000 is this lab's least" in floored.why


def test_the_busiest_case_decides_not_every_host_of_the_topology():
    lab = load_lab("lab-placement")
    assert len(lab.fabric.hosts) > 8
    assert all(len(d.hosts) == 8 for d in demands(lab.fabric, lab.scenario, PMTU))
    assert len(demands(lab.fabric, None, PMTU)[0].hosts) == len(lab.fabric.hosts)


def test_a_pinned_tdf_says_how_loaded_it_is():
    lab = load_lab("incast-1x5")
    low = pinned(lab.fabric, None, PMTU, SLOW, 10, "option")
    assert low.how == "option" and low.load > SAFE_FRACTION and f"beyond the {SAFE_FRACTION:.0%} kept for the agents" in low.why
    assert "--tdf" in low.why
    # The cores suffice but one agent's thread does not: said as such, not as the cores' share.
    nic_frames = sum(demands(lab.fabric, None, PMTU)[0].hosts.values()) / 1000 / 2  # at TDF 1000, per NIC
    one = AgentCosts(switch=((1, 1e-9),), nic=((nic_frames, 0.4),), cores=8)  # nicd: 0.8 of a core
    busy = pinned(lab.fabric, None, PMTU, one, 1000, "lab")
    assert busy.load < SAFE_FRACTION and "nicd alone" in busy.why and f"of one core, beyond the {SAFE_FRACTION:.0%}" in busy.why
    assert "within" in pinned(lab.fabric, None, PMTU, one, 10 ** 5, "lab").why


def test_agents_that_need_more_than_the_machine_at_any_rate_get_the_largest_tdf_and_say_so():
    fabric = load_lab("leaf-spine-4x4").fabric
    starved = AgentCosts(switch=((1, 0.2),), nic=((1, 0.1),), cores=2)  # a tenth of a core for the first frame
    choice = choose_tdf(fabric, None, PMTU, starved)
    assert choice.tdf == MAX_TDF and "no TDF keeps the peak" in choice.why and choice.load > SAFE_FRACTION


def test_a_machine_that_runs_events_late_needs_frames_that_last_longer_the_more_agents_wait():
    lab = load_lab("lab-pfc")
    cases = demands(lab.fabric, lab.scenario, PMTU, shared_agents=False)
    assert max(d.busy_agents for d in cases) == 6  # five hosts' nicd and the leaf
    late = AgentCosts(FAST.switch, FAST.nic, 2, late_p99_s=0.5e-3)
    need_s = LATENESS_MARGIN * 0.5e-3 * 6 / CALIBRATION_AGENTS
    frame_s = frame_bytes(PMTU) * 8 / 100e9  # one MTU frame at 100G, production time
    floor = latency_floor(lab.fabric, PMTU, late, cases)
    assert frame_s * floor >= need_s > frame_s * max(t for t in range(1, floor) if t == round_up(t))
    choice = choose_tdf(lab.fabric, lab.scenario, PMTU, late, shared_agents=False)
    assert choice.tdf == floor > choose_tdf(lab.fabric, lab.scenario, PMTU, FAST, shared_agents=False).tdf
    assert "0.5 ms late (p99, 3 agents)" in choice.why and f"6 agents busy a frame must last {LATENESS_MARGIN * 2:.2g}× that" in choice.why
    shared = demands(lab.fabric, lab.scenario, PMTU)  # one nicd for the five hosts: each NIC still waits
    assert max(d.busy_agents for d in shared) == 6 and latency_floor(lab.fabric, PMTU, late, shared) == floor
    # More than LATENESS_AGENTS_MAX busy wait no longer: their agents are still two processes.
    assert LATENESS_AGENTS_MAX == 6
    for other, agents in (("lab-ecmp", 14), ("lab-placement", 12)):
        fabric, scenario = load_lab(other).fabric, load_lab(other).scenario
        others = demands(fabric, scenario, PMTU)
        assert max(d.busy_agents for d in others) == agents
        frame_other = frame_bytes(PMTU) * 8 / max(link.rate_bps for link in fabric.links)
        assert latency_floor(fabric, PMTU, late, others) == min(t for t in range(1, 10 ** 5) if t == round_up(t)
                                                                 and frame_other * t >= need_s)
    assert latency_floor(lab.fabric, PMTU, late, cases, bound_s=10e-3) == 1  # a lab with its own, longer bound


def test_one_switchd_for_every_switch_costs_one_process_at_their_frames_together():
    lab = load_lab("leaf-spine-2x2")
    shared, apart = demands(lab.fabric, None, PMTU)[0], demands(lab.fabric, None, PMTU, shared_agents=False)[0]
    hops = sum(shared.switches.values())
    assert set(shared.agent_cores(SLOW, 1000)) == {"nicd", "switchd"}
    assert shared.agent_cores(SLOW, 1000)["switchd"] == pytest.approx(cores_at(SLOW.switch, hops / 1000))
    assert set(apart.agent_cores(SLOW, 1000)) == {n.name for n in (*lab.fabric.hosts, *lab.fabric.switches)}
    # one process wakes once for all: fewer cores than four switches each waking for its own frames
    assert shared.agent_cores(SLOW, 1000)["switchd"] < sum(
        cores_at(SLOW.switch, f / 1000) for f in shared.switches.values())


def test_a_shared_switchd_reads_its_own_curve_where_the_calibration_measured_a_path_through_several_switches():
    lab = load_lab("leaf-spine-2x2")
    shared, apart = demands(lab.fabric, None, PMTU)[0], demands(lab.fabric, None, PMTU, shared_agents=False)[0]
    hops = sum(shared.switches.values())
    # a three-hop flow at the fastest one-switch rate cost less than three times that switch's cores
    path = AgentCosts(SLOW.switch, SLOW.nic, 2, shared_switch=(*SLOW.switch, (36000, 0.6)))
    assert shared.agent_cores(path, 1000)["switchd"] == pytest.approx(cores_at(path.shared_switch, hops / 1000))
    assert shared.agent_cores(path, 1000)["switchd"] < shared.agent_cores(SLOW, 1000)["switchd"]
    assert apart.agent_cores(path, 1000) == apart.agent_cores(SLOW, 1000)  # one switch a process: the one-switch curve
    assert choose_tdf(lab.fabric, None, PMTU, path).tdf <= choose_tdf(lab.fabric, None, PMTU, SLOW).tdf
    assert "and through three switches" in choose_tdf(lab.fabric, None, PMTU, path).why


def test_flows_that_share_wake_ups_are_priced_as_the_busiest_alone_and_the_rest_at_the_paired_flows_extra():
    lab = load_lab("lab-ecmp")  # four elephants across the racks, started together
    one_qp = next(d for d in demands(lab.fabric, lab.scenario, PMTU) if d.case == "one-qp")
    paired = AgentCosts(SLOW.switch, SLOW.nic, 2, nic_extra_s=10e-6, switch_extra_s=5e-6)
    tdf = 2000
    nic, total = max(one_qp.hosts.values()) / tdf, sum(one_qp.hosts.values()) / tdf
    switch, hops = max(one_qp.switches.values()) / tdf, sum(one_qp.switches.values()) / tdf
    assert one_qp.agent_cores(paired, tdf) == {
        "nicd": pytest.approx(2 * cores_at(SLOW.nic, nic) + (total - 2 * nic) * 10e-6),
        "switchd": pytest.approx(cores_at(SLOW.switch, switch) + (hops - switch) * 5e-6)}
    # cheaper than every frame on the curve, which is still the price without the paired flow
    assert all(paired_cores < one_qp.agent_cores(SLOW, tdf)[agent]
               for agent, paired_cores in one_qp.agent_cores(paired, tdf).items())
    assert choose_tdf(lab.fabric, lab.scenario, PMTU, paired).tdf < choose_tdf(lab.fabric, lab.scenario, PMTU, SLOW).tdf
    # never above the curve: an extra frame dearer than the curve's is priced on the curve
    dear = AgentCosts(SLOW.switch, SLOW.nic, 2, nic_extra_s=1e-3, switch_extra_s=1e-3)
    assert one_qp.agent_cores(dear, tdf) == pytest.approx(one_qp.agent_cores(SLOW, tdf))
    # and the line says what a frame costs at that price, and that it was measured
    assert f"at {one_qp.agent_cores(paired, tdf)['nicd'] / total * 1e6:.0f} µs each" in one_qp.describe(paired, tdf)
    assert "beside other flows' frames" in choose_tdf(lab.fabric, lab.scenario, PMTU, paired).why
    assert "beside" not in choose_tdf(lab.fabric, lab.scenario, PMTU, SLOW).why


def test_one_pair_costs_what_the_curve_says_whatever_the_paired_flow_measured():
    lab = load_lab("lab-pfc")  # an incast: the receiver's frames are half of all the NICs'
    pfc = next(d for d in demands(lab.fabric, lab.scenario, PMTU) if d.case == "pfc")
    paired = AgentCosts(SLOW.switch, SLOW.nic, 2, nic_extra_s=1e-6, switch_extra_s=1e-6)
    assert pfc.agent_cores(paired, 1000) == pytest.approx(pfc.agent_cores(SLOW, 1000))


@pytest.mark.parametrize("costs", [SLOW, AgentCosts(SLOW.switch, SLOW.nic, 2, 4e-5, (*SLOW.switch, (36000, 0.6))),
                                   AgentCosts(SLOW.switch, SLOW.nic, 2, 4e-5, nic_extra_s=1.2e-5, switch_extra_s=9e-6)])
def test_costs_survive_their_cache_round_trip(costs):
    assert AgentCosts.from_json(costs.to_json()) == costs


def test_hosts_without_an_emulated_nic_cost_nicd_nothing_and_the_line_says_their_kernels_are_not_counted():
    lab = load_lab("lab-training")  # gloo over TCP: the hosts' own kernels move their frames
    assert lab.nic == "none" and not lab.runs_nicd and load_lab("lab-pfc").runs_nicd
    with_nicd, without = demands(lab.fabric, lab.scenario, PMTU)[0], demands(lab.fabric, lab.scenario, PMTU, nicd=False)[0]
    assert with_nicd.hosts == without.hosts  # the same frames, only who moves them differs
    assert set(with_nicd.agent_cores(FAST, 1000)) == {"nicd", "switchd"} and set(without.agent_cores(FAST, 1000)) == {"switchd"}
    assert without.busy_agents == sum(1 for f in without.switches.values() if f > 0) < with_nicd.busy_agents
    choice = pinned(lab.fabric, lab.scenario, PMTU, FAST, 1000, "lab", nicd=False)
    assert "nicd" not in choice.why and "the hosts' own kernels moving theirs (no emulated NIC: not counted)" in choice.why
    assert choose_tdf(lab.fabric, lab.scenario, PMTU, FAST, nicd=False).tdf <= choose_tdf(lab.fabric, lab.scenario, PMTU, FAST).tdf


def _flow(hosts: tuple[str, ...], frames_per_s: float, switchd: float, nicd: float):
    from rocelab.runtime.calibration import FlowCost, switches_of

    nodes = (*hosts, *switches_of(*hosts[:2]))
    pids = {n: 1 if n.startswith("h") else 2 for n in nodes}  # one nicd and one switchd, as the netns engine runs them
    return FlowCost(hosts, 0.4, frames_per_s, {n: nicd if pids[n] == 1 else switchd for n in nodes},
                    {}, 4e-5, pids)


def test_the_calibration_reads_the_paired_flows_extra_per_frame_off_what_one_pair_alone_costs():
    from rocelab.runtime.calibration import costs_of

    alone = [_flow(("h1", "h2"), 12000, 0.25, 0.64), _flow(("h3", "h4"), 2400, 0.06, 0.17),
             _flow(("h5", "h6"), 480, 0.02, 0.05), _flow(("h1", "h7"), 12000, 0.45, 0.64)]
    paired = _flow(("h3", "h4", "h8", "h9", "h10", "h11", "h12", "h13"), 2400, 0.13, 0.37)
    costs = costs_of([*alone, paired])
    assert costs.nic == ((480, 0.025), (2400, 0.085), (12000, 0.32))  # a NIC: half the process serving a pair
    # three more pairs: six more NICs' frames and three more frames through leaf1, each at 2,400 a second
    assert costs.nic_extra_s == pytest.approx((0.37 - 0.17) / (6 * 2400))
    assert costs.switch_extra_s == pytest.approx((0.13 - 0.06) / (3 * 2400))
    assert costs_of(alone).nic_extra_s is None and costs_of(alone).switch_extra_s is None
    # pairs that cost no more than one pair alone: the machine disturbed the measurement, and
    # every frame stays on the curve rather than the others' costing nothing
    disturbed = costs_of([*alone, _flow(paired.hosts, 2400, 0.05, 0.1)])
    assert (disturbed.nic_extra_s, disturbed.switch_extra_s) == (None, None)


def test_the_cache_keeps_each_settings_figures_so_switching_back_measures_nothing(monkeypatch, tmp_path):
    """ROCELAB_KEEP_AWAKE, the pure switch or the pure loop changed and changed back: the first
    setting's figures are still kept, and only the newest few keys are."""
    from rocelab.runtime import calibration

    monkeypatch.setenv("ROCELAB_CACHE_DIR", str(tmp_path))
    setting, measured = ["a"], []

    def measure(lab_name):
        measured.append(setting[0])
        return replace(SLOW, late_p99_s=len(measured) * 1e-5)

    monkeypatch.setattr(calibration, "cache_key", lambda busy: setting[0])
    monkeypatch.setattr(calibration, "measure", measure)
    monkeypatch.setattr(calibration, "others_busy", lambda: 0.0)
    (tmp_path / "calibration.json").write_text('{"key": "a", "costs": {}}')  # an older rocelab's single key
    first = calibration.costs("lab-pfc")
    setting[0] = "b"
    second = calibration.costs("lab-pfc")
    setting[0] = "a"
    assert calibration.costs("lab-pfc") == first != second and measured == ["a", "b"]
    for n in range(calibration.KEPT_CALIBRATIONS):
        setting[0] = f"k{n}"
        calibration.costs("lab-pfc")
    setting[0] = "a"
    calibration.costs("lab-pfc")
    assert measured[-1] == "a" and len(measured) == 2 + calibration.KEPT_CALIBRATIONS + 1


def test_a_machine_busy_with_other_work_is_measured_apart_and_its_tdf_says_so(monkeypatch, tmp_path):
    """Other processes keeping the CPUs busy when `up` looks: the figures are measured then and
    kept under their own key, the idle machine's stay kept, and the TDF's reason says how busy."""
    from rocelab.runtime import calibration

    monkeypatch.setenv("ROCELAB_CACHE_DIR", str(tmp_path))
    busy, measured = [0.02], []

    def measure(lab_name):
        measured.append(busy[0])
        return replace(FAST, late_p99_s=1e-4 if busy[0] >= calibration.BUSY_SHARE else 3e-5)

    monkeypatch.setattr(calibration, "measure", measure)
    monkeypatch.setattr(calibration, "others_busy", lambda: busy[0])
    idle = calibration.costs("lab-pfc")
    busy[0] = 0.5
    loaded = calibration.costs("lab-pfc")
    busy[0] = 0.03
    assert calibration.costs("lab-pfc") == idle and measured == [0.02, 0.5]
    assert (idle.busy_share, loaded.busy_share) == (0.0, 0.5)
    assert AgentCosts.from_json(loaded.to_json()) == loaded
    lab = load_lab("lab-pfc")
    quiet, noisy = (choose_tdf(lab.fabric, lab.scenario, PMTU, c) for c in (idle, loaded))
    assert noisy.tdf > quiet.tdf
    assert "other processes keeping 50% of the CPUs busy" in noisy.why and "of the CPUs busy" not in quiet.why
