"""`invoke calc` against arithmetic done by hand (each expected value shows its working)."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from rich.console import Console

from rocelab.traffic.calc import CalcInputs, CalcResult, calculate, render_table, to_json
from rocelab.errors import InputError

approx = pytest.approx


def calc(**kwargs: str) -> CalcResult:
    return calculate(CalcInputs.from_strings(**kwargs))


def test_175b_fp32_over_1024_gpus_on_400g():
    r = calc(params="175B", dtype="fp32", gpus="1024", nic_speed="400G",
             usd_per_gpu_hour="30", sync_budget="30")

    # S = 175e9 params × 4 B = 700e9 B = 700 GB
    assert r.gradient_size_bytes == 700e9
    # 2(n − 1) = 2 · 1023 = 2046 steps of S/n = 700e9 / 1024 = 683,593,750 B
    assert r.ring_steps == 2046
    assert r.ring_step_size_bytes == 683_593_750
    # per rank: 2 · 1023/1024 · 700e9 = 2046 · 683,593,750 = 1,398,632,812,500 B (≈ 1.4 TB)
    assert r.ring_bytes_per_rank == approx(2 * 1023 / 1024 * 700e9)
    assert r.ring_bytes_per_rank == approx(1_398_632_812_500)
    # one 400G NIC per GPU: 8 × 400e9 / 8 = 400e9 b/s
    assert r.nic_rate_per_gpu_bps == 400e9
    # t = 1,398,632,812,500 · 8 / 400e9 = 27.97265625 s
    assert r.allreduce_time_s == approx(1_398_632_812_500 * 8 / 400e9)
    assert r.allreduce_time_s == approx(27.97265625)
    # algbw = S / t = 700e9 / 27.97265625 ≈ 25.02 GB/s
    assert r.line_rate_algbw_bytes_per_s == approx(700e9 / 27.97265625)
    # busbw = algbw · 2046/1024 = 400e9 / 8 = 50 GB/s: at line rate busbw is the NIC speed
    assert r.busbw_factor == approx(2046 / 1024)
    assert r.line_rate_busbw_bytes_per_s == approx(50e9)
    # in a 30 s budget: 1,398,632,812,500 · 8 / 30 = 372,968,750,000 b/s ≈ 373 Gb/s per GPU
    assert r.needed_rate_per_gpu_bps == approx(372_968_750_000)
    # algbw needed: 700e9 / 30 ≈ 23.33 GB/s
    assert r.needed_algbw_bytes_per_s == approx(700e9 / 30)
    # a non-overlapped AllReduce: 1024 · 30 / 3600 $/s × 27.97265625 s = 859,320 / 3600 = $238.70
    assert r.allreduce_step_cost_usd == approx(238.7)


def test_idle_cost_of_1024_gpus_at_30_usd_per_gpu_hour():
    r = calc(params="175e9", dtype="fp32", gpus="1024", nic_speed="400G",
             usd_per_gpu_hour="$30", stall="600")

    # 1024 · 30 / 60 = 30,720 / 60 = $512 per idle minute
    assert r.idle_minute_cost_usd == approx(512)
    # 1024 · 30 / 3600 = $8.533… per idle second
    assert r.idle_second_cost_usd == approx(1024 * 30 / 3600)
    # a 10-minute stall: 512 $/min × 10 min = $5,120
    assert r.stall_cost_usd == approx(5120)


def test_small_case_8_gpus_1b_bf16_on_100g():
    r = calc(params="1B", dtype="bf16", gpus="8", nic_speed="100G",
             usd_per_gpu_hour="2", sync_budget="100ms", stall="0.5")

    # S = 1e9 · 2 B = 2 GB
    assert r.gradient_size_bytes == 2e9
    # 2 · 7 = 14 steps of 2e9 / 8 = 250 MB
    assert r.ring_steps == 14
    assert r.ring_step_size_bytes == 250e6
    # per rank: 2 · 7/8 · 2e9 = 3.5e9 B
    assert r.ring_bytes_per_rank == approx(3.5e9)
    # t = 3.5e9 · 8 / 100e9 = 28e9 / 100e9 = 0.28 s
    assert r.allreduce_time_s == approx(0.28)
    # algbw = 2e9 / 0.28 ≈ 7.143 GB/s; busbw = that · 14/8 = 12.5 GB/s = 100 Gb/s / 8
    assert r.line_rate_algbw_bytes_per_s == approx(2e9 / 0.28)
    assert r.line_rate_busbw_bytes_per_s == approx(12.5e9)
    # in 0.1 s: 3.5e9 · 8 / 0.1 = 280e9 b/s per GPU, 2.8× the NIC; algbw 2e9 / 0.1 = 20 GB/s
    assert r.needed_rate_per_gpu_bps == approx(280e9)
    assert r.needed_algbw_bytes_per_s == approx(20e9)
    # 8 · 2 / 60 = $0.2667 per minute; 8 · 2 / 3600 = $0.004444 per second
    assert r.idle_minute_cost_usd == approx(16 / 60)
    assert r.idle_second_cost_usd == approx(16 / 3600)
    # stall: 16 / 3600 · 0.5 = $0.002222; AllReduce: 16 / 3600 · 0.28 = $0.001244
    assert r.stall_cost_usd == approx(16 / 3600 * 0.5)
    assert r.allreduce_step_cost_usd == approx(16 / 3600 * 0.28)


def test_four_400g_nics_per_8_gpu_server_halve_each_gpus_share():
    r = calc(params="1B", dtype="fp16", gpus="16", nic_speed="400G", nics_per_server="4",
             gpus_per_server="8", usd_per_gpu_hour="2")

    # per GPU: 4 NICs × 400e9 / 8 GPUs = 200e9 b/s
    assert r.nic_rate_per_gpu_bps == 200e9
    # S = 2e9 B; per rank: 2 · 15/16 · 2e9 = 3.75e9 B
    assert r.ring_bytes_per_rank == approx(3.75e9)
    # t = 3.75e9 · 8 / 200e9 = 0.15 s (twice the 0.075 s of eight NICs)
    assert r.allreduce_time_s == approx(0.15)
    # busbw at line rate = 200e9 / 8 = 25 GB/s
    assert r.line_rate_busbw_bytes_per_s == approx(25e9)


def test_optional_outputs_are_none_without_their_inputs():
    r = calc(params="1B", dtype="fp8", gpus="8", nic_speed="100G", usd_per_gpu_hour="2")

    assert r.needed_rate_per_gpu_bps is None
    assert r.needed_algbw_bytes_per_s is None
    assert r.stall_cost_usd is None


@pytest.mark.parametrize("text, params", [
    ("175e9", 175_000_000_000),
    ("175B", 175_000_000_000),
    ("175b", 175_000_000_000),
    ("175000000000", 175_000_000_000),
    ("0.175T", 175_000_000_000),
    ("1.3B", 1_300_000_000),  # exact: no float rounding to 1,299,999,999
    ("350M", 350_000_000),
    ("125K", 125_000),
])
def test_parameter_count_forms(text, params):
    inputs = CalcInputs.from_strings(params=text, dtype="fp32", gpus="8", nic_speed="100G",
                                     usd_per_gpu_hour="1")
    assert inputs.params == params


@pytest.mark.parametrize("text, bytes_per_param", [
    ("fp32", 4), ("FP32", 4), ("bf16", 2), ("fp16", 2), ("fp8", 1), ("2", 2), ("0.5", 0.5),
])
def test_dtype_forms(text, bytes_per_param):
    inputs = CalcInputs.from_strings(params="1B", dtype=text, gpus="8", nic_speed="100G",
                                     usd_per_gpu_hour="1")
    assert inputs.bytes_per_param == bytes_per_param


@pytest.mark.parametrize("text, time_s", [("0.5", 0.5), ("500ms", 0.5), ("2s", 2.0), (3, 3.0)])
def test_duration_forms(text, time_s):
    inputs = CalcInputs.from_strings(params="1B", dtype="fp32", gpus="8", nic_speed="100G",
                                     usd_per_gpu_hour="1", sync_budget=text, stall=text)
    assert inputs.sync_budget_s == approx(time_s)
    assert inputs.stall_s == approx(time_s)


def test_defaults_are_8_gpus_and_8_nics_per_server():
    inputs = CalcInputs.from_strings(params="1B", dtype="fp32", gpus="8", nic_speed="100G",
                                     usd_per_gpu_hour="1")
    assert (inputs.gpus_per_server, inputs.nics_per_server) == (8, 8)
    assert inputs.nic_rate_bps == 100e9


GOOD = dict(params="175B", dtype="fp32", gpus="1024", nic_speed="400G", usd_per_gpu_hour="30")


@pytest.mark.parametrize("key, value, option", [
    ("gpus", "-8", "--gpus"),
    ("gpus", "1", "--gpus"),  # a ring needs two ranks
    ("gpus", "8.5", "--gpus"),
    ("dtype", "fp33", "--dtype"),
    ("dtype", "-2", "--dtype"),
    ("nic_speed", "400Q", "--nic-speed"),
    ("params", "175X", "--params"),
    ("params", "1.5", "--params"),  # not a whole number of parameters
    ("params", "0", "--params"),
    ("gpus_per_server", "0", "--gpus-per-server"),
    ("nics_per_server", "four", "--nics-per-server"),
    ("usd_per_gpu_hour", "-3", "--usd-per-gpu-hour"),
    ("usd_per_gpu_hour", "nan", "--usd-per-gpu-hour"),
    ("sync_budget", "0", "--sync-budget"),
    ("sync_budget", "soon", "--sync-budget"),
    ("stall", "-1", "--stall"),
])
def test_bad_input_names_option_value_and_expected_form(key, value, option):
    with pytest.raises(InputError) as err:
        CalcInputs.from_strings(**{**GOOD, key: value})

    [problem] = err.value.problems
    assert problem.path == option
    assert repr(value) in problem.message
    assert "expected" in problem.message
    assert str(err.value).startswith(f"calc: {option}: expected ")


def test_every_bad_option_is_reported_at_once():
    with pytest.raises(InputError) as err:
        CalcInputs.from_strings(**{**GOOD, "gpus": "-8", "dtype": "fp33", "nic_speed": "400Q"})

    assert [p.path for p in err.value.problems] == ["--dtype", "--gpus", "--nic-speed"]


def test_missing_required_inputs_are_named():
    with pytest.raises(InputError) as err:
        CalcInputs.from_strings()

    assert [p.path for p in err.value.problems] == [
        "--params", "--dtype", "--gpus", "--nic-speed", "--usd-per-gpu-hour"]
    assert all(p.message.startswith("required: expected ") for p in err.value.problems)


def test_to_json_keys_and_values():
    doc = to_json(calc(**GOOD, sync_budget="30", stall="600"))

    assert set(doc) == {
        "inputs", "gradient_size_bytes", "ring_steps", "ring_step_size_bytes",
        "ring_bytes_per_rank", "nic_rate_per_gpu_bps", "allreduce_time_s",
        "line_rate_algbw_bytes_per_s", "busbw_factor", "line_rate_busbw_bytes_per_s",
        "needed_rate_per_gpu_bps", "needed_algbw_bytes_per_s", "idle_minute_cost_usd",
        "idle_second_cost_usd", "stall_cost_usd", "allreduce_step_cost_usd",
    }
    assert doc["inputs"] == {
        "params": 175_000_000_000, "bytes_per_param": 4.0, "gpus": 1024,
        "nic_rate_bps": 400_000_000_000, "usd_per_gpu_hour": 30.0, "gpus_per_server": 8,
        "nics_per_server": 8, "sync_budget_s": 30.0, "stall_s": 600.0,
    }
    assert doc["gradient_size_bytes"] == 700e9
    assert doc["idle_minute_cost_usd"] == approx(512)
    assert json.loads(json.dumps(doc)) == doc  # plain JSON types only


def test_to_json_gives_null_for_quantities_without_their_inputs():
    doc = json.loads(json.dumps(to_json(calc(**GOOD))))

    assert doc["needed_rate_per_gpu_bps"] is None
    assert doc["stall_cost_usd"] is None


def rendered(result: CalcResult) -> tuple[int, str]:
    table = render_table(result)
    out = io.StringIO()
    Console(file=out, width=200).print(table)
    return table.row_count, out.getvalue()


QUANTITIES = [
    "Gradient size per step", "Ring steps", "Bytes per ring step",
    "Ring bytes sent (= received) per rank", "NIC bandwidth per GPU",
    "AllReduce time at line rate", "algbw at line rate", "busbw factor",
    "busbw at line rate", "Bandwidth per GPU needed in 30 s", "algbw needed in 30 s",
    "Cost of an idle minute", "Cost of an idle second", "Cost of a 600 s stall",
    "Cost per step of a non-overlapped AllReduce",
]


def test_render_table_has_a_row_per_quantity():
    rows, text = rendered(calc(**GOOD, sync_budget="30", stall="600"))

    # one row per output field (every field but `inputs`)
    assert rows == len(dataclasses.fields(CalcResult)) - 1 == len(QUANTITIES)
    for quantity in QUANTITIES:
        assert quantity in text
    # values in engineers' units, worked out in test_175b_fp32_over_1024_gpus_on_400g
    for value in ("700 GB", "1.399 TB", "683.6 MB", "2,046", "400 Gb/s", "27.97 s",
                  "50 GB/s (400 Gb/s)", "373 Gb/s", "$512.00", "$8.53", "$5,120.00", "$238.70"):
        assert value in text


def test_render_table_leaves_out_rows_without_their_inputs():
    rows, text = rendered(calc(**GOOD))

    assert rows == len(QUANTITIES) - 3
    assert "needed" not in text
    assert "stall" not in text
