"""`up --tdf auto`: the TDF a lab's peak needs on a machine with given per-frame costs."""

from __future__ import annotations

import pytest

from rocelab.model.lab import load_lab
from rocelab.model.tdf import (MAX_TDF, SAFE_FRACTION, AgentCosts, busiest_hosts, choose_tdf, peak_cores, pinned,
                               round_up)

SLOW = AgentCosts(switch_frame_s=90e-6, nic_frame_s=75e-6, cores=2, switch_busy_cores=0.02, nic_busy_cores=0.02)
FAST = AgentCosts(switch_frame_s=10e-6, nic_frame_s=20e-6, cores=2)


@pytest.mark.parametrize("value, expected", [(0.3, 1), (1, 1), (1.2, 2), (2.1, 3), (3, 3), (5, 5), (7, 8),
                                             (13, 15), (1001, 1250), (2000, 2000), (2001, 2500), (2600, 3000),
                                             (5100, 6000), (8001, 10000), (9999, 10000)])
def test_round_up_takes_the_next_step_of_the_dial(value, expected):
    assert round_up(value) == expected


def test_the_chosen_tdf_keeps_the_peak_within_the_safe_share_and_no_smaller_round_one_does():
    lab = load_lab("leaf-spine-2x2")
    choice = choose_tdf(lab.fabric, None, 4096, SLOW)
    assert choice.how == "auto" and choice.load <= SAFE_FRACTION
    hosts = busiest_hosts(lab.fabric, None)
    smaller = [round_up(t) for t in range(1, choice.tdf) if round_up(t) < choice.tdf]
    assert smaller and all(peak_cores(lab.fabric, hosts, 4096, SLOW, t) / SLOW.cores > SAFE_FRACTION for t in smaller)
    assert "4 hosts" in choice.why and "3 switch hops" in choice.why


def test_a_slower_machine_gets_a_larger_tdf_and_a_floor_is_kept():
    fabric = load_lab("leaf-spine-2x2").fabric
    assert choose_tdf(fabric, None, 4096, SLOW).tdf > choose_tdf(fabric, None, 4096, FAST).tdf
    floored = choose_tdf(fabric, None, 4096, FAST, floor=4000)
    assert floored.tdf == 4000 and "4000 is this lab's least" in floored.why


def test_the_busiest_case_decides_not_every_host_of_the_topology():
    lab = load_lab("lab-placement")
    assert len(lab.fabric.hosts) > 8
    assert len(busiest_hosts(lab.fabric, lab.scenario)) == 8
    assert len(busiest_hosts(lab.fabric, None)) == len(lab.fabric.hosts)


def test_one_switch_is_one_hop_and_a_pinned_tdf_says_how_loaded_it_is():
    lab = load_lab("incast-1x5")
    assert "1 switch hops" in choose_tdf(lab.fabric, None, 4096, SLOW).why
    low = pinned(lab.fabric, None, 4096, SLOW, 10, "option")
    assert low.how == "option" and low.load > SAFE_FRACTION and "beyond" in low.why and "--tdf" in low.why


def test_agents_that_need_more_than_the_machine_even_idle_get_the_largest_tdf_and_say_so():
    fabric = load_lab("leaf-spine-4x4").fabric
    starved = AgentCosts(switch_frame_s=90e-6, nic_frame_s=75e-6, cores=2, switch_busy_cores=0.2, nic_busy_cores=0.1)
    choice = choose_tdf(fabric, None, 4096, starved)
    assert choice.tdf == MAX_TDF and "no TDF keeps the peak" in choice.why and choice.load > SAFE_FRACTION
