"""`invoke calc`: the arithmetic of one data-parallel gradient AllReduce, before any lab.

Symbols: P parameters, b bytes per parameter (of the gradients as communicated: 4 for
fp32, 2 for bf16/fp16, 1 for fp8), n ranks (= GPUs; one rank per GPU), G GPUs per
server, K NICs per server, R NIC speed in bit/s, T sync budget (the step time the
AllReduce must fit in), c dollars per GPU-hour, d a stall's duration in seconds.

Ring AllReduce (REFERENCE.md, "Collective traffic"; nccl-tests `doc/PERFORMANCE.md`,
"Bus bandwidth / AllReduce"):

    S                    = P · b                      gradient bytes per step
    ring steps           = 2(n − 1)                   n − 1 reduce-scatter + n − 1 all-gather
    bytes per ring step  = S / n                      one chunk per step
    bytes per rank       = 2(n − 1)/n · S             sent, and the same received, by every rank

Time at line rate. A rank's NIC share is B = K · R / G bit/s (K = G: one NIC per GPU).
The ring's inter-server hops are assumed to be the bottleneck (NVLink inside a server is
faster), as nccl-tests' "t = (S/B) · 2(n − 1)/n" assumes one bottleneck bandwidth B per
rank:

    t                    = 2(n − 1)/n · S · 8 / B     seconds; no latency, header or
                                                      congestion overhead: a lower bound

Bandwidths as nccl-tests reports them (`doc/PERFORMANCE.md`; `src/all_reduce.cu`,
`AllReduceGetBw`: `busBw = baseBw * 2*(nranks-1)/nranks`, baseBw = bytes / 1e9 / sec,
so "GB/s" there is 10^9 bytes per second):

    algbw                = S / t                      bytes per second
    busbw                = algbw · 2(n − 1)/n         = B / 8 at line rate; a healthy ring
                                                      measures ~92–96% of it (REFERENCE.md)

Within a sync budget T (the same formulas solved for bandwidth):

    per-GPU rate needed  = 2(n − 1)/n · S · 8 / T     bit/s; this is the busbw (× 8) that
                                                      all_reduce_perf must report
    algbw needed         = S / T                      bytes per second

Cost (every GPU idles while the cluster waits):

    idle minute          = n · c / 60                 dollars
    idle second          = n · c / 3600
    stall                = n · c · d / 3600
    AllReduce per step   = n · c · t / 3600           if the AllReduce were not overlapped
                                                      with compute
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from decimal import Decimal

from rich.table import Table

from rocelab.errors import Problems
from rocelab.units import parse_delay, parse_rate

BITS_PER_BYTE = 8

# Bytes per element of the gradients as they cross the wire.
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}

# Model sizes are written with B for billion ("175B"), not G.
_PARAMS = re.compile(r"^\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([kKmMbBtT]?)\s*$")
_PARAMS_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}

# Problems name the command, then the option (Problem's `file: path: message`).
_SOURCE = "calc"


@dataclass(frozen=True)
class CalcInputs:
    """Validated inputs. Build with `from_strings` unless the values are known good."""

    params: int
    bytes_per_param: float
    gpus: int
    nic_rate_bps: int
    usd_per_gpu_hour: float
    gpus_per_server: int = 8
    nics_per_server: int = 8
    sync_budget_s: float | None = None
    stall_s: float | None = None

    @classmethod
    def from_strings(
        cls,
        *,
        params: str | int | None = None,
        dtype: str | float | None = None,
        gpus: str | int | None = None,
        nic_speed: str | int | None = None,
        usd_per_gpu_hour: str | float | None = None,
        gpus_per_server: str | int = "8",
        nics_per_server: str | int = "8",
        sync_budget: str | float | None = None,
        stall: str | float | None = None,
    ) -> CalcInputs:
        """Parse what a CLI passes; every bad option is reported at once as InputError.

        Each keyword is an option of the same name with dashes (nic_speed → --nic-speed).
        """
        problems = Problems(_SOURCE)
        inputs = cls(
            params=_parse_params(problems, params),
            bytes_per_param=_parse_dtype(problems, dtype),
            gpus=_parse_count(problems, "--gpus", gpus, minimum=2, noun="GPUs", example="1024"),
            nic_rate_bps=_parse_nic_speed(problems, nic_speed),
            usd_per_gpu_hour=_parse_price(problems, usd_per_gpu_hour),
            gpus_per_server=_parse_count(
                problems, "--gpus-per-server", gpus_per_server, minimum=1, noun="GPUs",
                example="8"),
            nics_per_server=_parse_count(
                problems, "--nics-per-server", nics_per_server, minimum=1, noun="NICs",
                example="8"),
            sync_budget_s=_parse_duration(problems, "--sync-budget", sync_budget),
            stall_s=_parse_duration(problems, "--stall", stall),
        )
        problems.raise_if_any()
        return inputs


@dataclass(frozen=True)
class CalcResult:
    """Every derived quantity; None where the input it needs was not given."""

    inputs: CalcInputs
    gradient_size_bytes: float
    ring_steps: int
    ring_step_size_bytes: float
    ring_bytes_per_rank: float
    nic_rate_per_gpu_bps: float
    allreduce_time_s: float
    line_rate_algbw_bytes_per_s: float
    busbw_factor: float
    line_rate_busbw_bytes_per_s: float
    needed_rate_per_gpu_bps: float | None
    needed_algbw_bytes_per_s: float | None
    idle_minute_cost_usd: float
    idle_second_cost_usd: float
    stall_cost_usd: float | None
    allreduce_step_cost_usd: float


def calculate(inputs: CalcInputs) -> CalcResult:
    """The formulas of the module docstring, in the same order."""
    n = inputs.gpus
    size_bytes = inputs.params * inputs.bytes_per_param
    busbw_factor = 2 * (n - 1) / n
    bytes_per_rank = busbw_factor * size_bytes
    rate_per_gpu_bps = inputs.nics_per_server * inputs.nic_rate_bps / inputs.gpus_per_server
    time_s = bytes_per_rank * BITS_PER_BYTE / rate_per_gpu_bps
    algbw_bytes_per_s = size_bytes / time_s
    usd_per_s = n * inputs.usd_per_gpu_hour / 3600
    budget_s = inputs.sync_budget_s
    return CalcResult(
        inputs=inputs,
        gradient_size_bytes=size_bytes,
        ring_steps=2 * (n - 1),
        ring_step_size_bytes=size_bytes / n,
        ring_bytes_per_rank=bytes_per_rank,
        nic_rate_per_gpu_bps=rate_per_gpu_bps,
        allreduce_time_s=time_s,
        line_rate_algbw_bytes_per_s=algbw_bytes_per_s,
        busbw_factor=busbw_factor,
        line_rate_busbw_bytes_per_s=algbw_bytes_per_s * busbw_factor,
        needed_rate_per_gpu_bps=(
            None if budget_s is None else bytes_per_rank * BITS_PER_BYTE / budget_s),
        needed_algbw_bytes_per_s=None if budget_s is None else size_bytes / budget_s,
        idle_minute_cost_usd=n * inputs.usd_per_gpu_hour / 60,
        idle_second_cost_usd=usd_per_s,
        stall_cost_usd=None if inputs.stall_s is None else usd_per_s * inputs.stall_s,
        allreduce_step_cost_usd=usd_per_s * time_s,
    )


def to_json(result: CalcResult) -> dict:
    """The result as one JSON-ready document: the inputs under "inputs", then each output."""
    return asdict(result)


def render_table(result: CalcResult) -> Table:
    """Quantity, value in engineer's units, and how it was computed."""
    inp = result.inputs
    n = inp.gpus
    table = Table(
        title=(f"{_count(inp.params)} params × {inp.bytes_per_param:g} B/param · {n:,} GPUs · "
               f"{inp.nics_per_server} × {_bits(inp.nic_rate_bps)} NICs per "
               f"{inp.gpus_per_server}-GPU server"),
    )
    table.add_column("Quantity")
    table.add_column("Value", justify="right")
    table.add_column("How")
    table.add_row("Gradient size per step (S)", _bytes(result.gradient_size_bytes),
                  "params × bytes per param")
    table.add_row("Ring steps", f"{result.ring_steps:,}", f"2(n − 1), n = {n:,} ranks")
    table.add_row("Bytes per ring step", _bytes(result.ring_step_size_bytes), "S / n")
    table.add_row("Ring bytes sent (= received) per rank", _bytes(result.ring_bytes_per_rank),
                  "2(n − 1)/n × S")
    table.add_row("NIC bandwidth per GPU (B)", _bits(result.nic_rate_per_gpu_bps),
                  f"{inp.nics_per_server} NICs × {_bits(inp.nic_rate_bps)} / "
                  f"{inp.gpus_per_server} GPUs")
    table.add_row("AllReduce time at line rate (t)", seconds_text(result.allreduce_time_s),
                  "bytes per rank × 8 / B")
    table.add_row("algbw at line rate", _bytes_per_s(result.line_rate_algbw_bytes_per_s),
                  "S / t (nccl-tests)")
    table.add_row("busbw factor", f"{result.busbw_factor:.4g}", "2(n − 1)/n (nccl-tests)")
    table.add_row("busbw at line rate", _bytes_per_s(result.line_rate_busbw_bytes_per_s),
                  "algbw × 2(n − 1)/n = B / 8")
    if result.needed_rate_per_gpu_bps is not None:
        budget = seconds_text(inp.sync_budget_s)
        table.add_row(f"Bandwidth per GPU needed in {budget}",
                      _bits(result.needed_rate_per_gpu_bps),
                      "bytes per rank × 8 / budget (= busbw × 8)")
    if result.needed_algbw_bytes_per_s is not None:
        table.add_row(f"algbw needed in {seconds_text(inp.sync_budget_s)}",
                      _bytes_per_s(result.needed_algbw_bytes_per_s), "S / budget")
    table.add_row("Cost of an idle minute", _usd(result.idle_minute_cost_usd),
                  f"{n:,} GPUs × ${inp.usd_per_gpu_hour:g}/GPU-h / 60")
    table.add_row("Cost of an idle second", _usd(result.idle_second_cost_usd),
                  f"{n:,} GPUs × ${inp.usd_per_gpu_hour:g}/GPU-h / 3600")
    if result.stall_cost_usd is not None:
        table.add_row(f"Cost of a {seconds_text(inp.stall_s)} stall", _usd(result.stall_cost_usd),
                      "idle second × stall")
    table.add_row("Cost per step of a non-overlapped AllReduce",
                  _usd(result.allreduce_step_cost_usd), "idle second × t")
    return table


# --- parsing: each helper records a problem and returns a placeholder on bad input ---

def _missing(problems: Problems, option: str, expected: str) -> None:
    problems.add(option, f"required: expected {expected}")


def _bad(problems: Problems, option: str, value: object, expected: str) -> None:
    problems.add(option, f"expected {expected}, got {str(value)!r}")


def _parse_params(problems: Problems, value: str | int | None) -> int:
    expected = "a parameter count like 175e9, 175B or 7.5B"
    if value is None:
        _missing(problems, "--params", expected)
        return 0
    m = _PARAMS.match(str(value))
    count = Decimal(m.group(1)) * _PARAMS_SCALE[m.group(2).lower()] if m else None
    # Decimal keeps "1.3B" exact; a fractional parameter count is a typo.
    if count is None or count < 1 or count != count.to_integral_value():
        _bad(problems, "--params", value, expected)
        return 0
    return int(count)


def _parse_dtype(problems: Problems, value: str | float | None) -> float:
    expected = "fp32, bf16, fp16, fp8 or a number of bytes per parameter like 2"
    if value is None:
        _missing(problems, "--dtype", expected)
        return 0.0
    name = str(value).strip().lower()
    if name in DTYPE_BYTES:
        return DTYPE_BYTES[name]
    return _positive_float(problems, "--dtype", value, expected)


def _parse_count(problems: Problems, option: str, value: str | int | None, *, minimum: int,
                 noun: str, example: str) -> int:
    expected = f"a whole number of {noun} of at least {minimum}, like {example}"
    if value is None:
        _missing(problems, option, expected)
        return minimum
    try:
        count = int(str(value).strip())
    except ValueError:
        count = None
    if count is None or count < minimum:
        _bad(problems, option, value, expected)
        return minimum
    return count


def _parse_nic_speed(problems: Problems, value: str | int | None) -> int:
    expected = "a rate like 400G, 100G or 25Gbps"
    if value is None:
        _missing(problems, "--nic-speed", expected)
        return 1
    try:
        return parse_rate(value)
    except ValueError:
        _bad(problems, "--nic-speed", value, expected)
        return 1


def _parse_price(problems: Problems, value: str | float | None) -> float:
    expected = "dollars per GPU-hour like 30 or 2.50"
    if value is None:
        _missing(problems, "--usd-per-gpu-hour", expected)
        return 0.0
    text = str(value).strip().removeprefix("$")
    try:
        price = float(text)
    except ValueError:
        price = math.nan
    # Zero is allowed: the bandwidth rows still make sense for a cluster you own.
    if not (math.isfinite(price) and price >= 0):
        _bad(problems, "--usd-per-gpu-hour", value, expected)
        return 0.0
    return price


def _parse_duration(problems: Problems, option: str, value: str | float | None) -> float | None:
    """Optional: seconds as a bare number, or with a unit (500ms, 2s)."""
    if value is None:
        return None
    expected = "a positive time in seconds like 0.5, or with a unit like 500ms or 2s"
    try:
        duration_s = float(str(value).strip())
    except ValueError:
        try:
            duration_s = parse_delay(value)
        except ValueError:
            duration_s = math.nan
    if not (math.isfinite(duration_s) and duration_s > 0):
        _bad(problems, option, value, expected)
        return None
    return duration_s


def _positive_float(problems: Problems, option: str, value: object, expected: str) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        _bad(problems, option, value, expected)
        return 0.0
    return number


# --- formatting: decimal prefixes, as NIC speeds and nccl-tests' GB/s use ---

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si_text(value: float, unit: str) -> str:
    for scale, prefix in _PREFIXES:
        if value >= scale:
            return f"{value / scale:,.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _bytes(size_bytes: float) -> str:
    return si_text(size_bytes, "B")


def _bits(rate_bps: float) -> str:
    return si_text(rate_bps, "b/s")


def _bytes_per_s(rate_bytes_per_s: float) -> str:
    # Both units: nccl-tests prints GB/s, link speeds are quoted in Gb/s.
    return f"{si_text(rate_bytes_per_s, 'B/s')} ({_bits(rate_bytes_per_s * BITS_PER_BYTE)})"


def seconds_text(time_s: float) -> str:
    if time_s >= 1:
        return f"{time_s:,.4g} s"
    if time_s >= 1e-3:
        return f"{time_s * 1e3:.4g} ms"
    return f"{time_s * 1e6:.4g} µs"


def _usd(cost_usd: float) -> str:
    # Cents for anything a finance team would see; significant digits below a dollar.
    return f"${cost_usd:,.2f}" if cost_usd >= 1 or cost_usd == 0 else f"${cost_usd:.3g}"


def _count(params: int) -> str:
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if params >= scale:
            return f"{params / scale:g}{suffix}"
    return str(params)
