"""The import direction of src/rocelab (docs/ARCHITECTURE.md): layers point down only, no cycle.

Every `import` counts, at module level or inside a function: a function-level import that
points up is the same dependency, only hidden."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# Bottom to top. A module may import its own layer and the layers below it. The first rule
# whose prefix matches a module decides its layer (longest prefixes first).
LAYERS = ("base", "kernel", "core", "model", "engines", "agents", "runtime", "reporting", "front door")
RULES = {
    "rocelab": "base", "rocelab.errors": "base", "rocelab.units": "base", "rocelab.registry": "base",
    "rocelab.paths": "base", "rocelab.yamlfile": "base", "rocelab.ethernet": "base",
    "rocelab.kernel": "kernel",
    "rocelab.qos": "core", "rocelab.qos.derived": "core", "rocelab.qos.nic": "core", "rocelab.switch": "core", "rocelab.roce": "core", "rocelab.traffic": "core",
    "rocelab.train": "core", "rocelab.probes.tally": "core", "rocelab.probes.layers": "core",
    "rocelab.routing": "core", "rocelab.routing.design": "model",
    "rocelab.model": "model", "rocelab.fabric": "model",
    "rocelab.engines": "engines",
    "rocelab.switch.agent": "agents", "rocelab.switch.kernel_fib": "agents", "rocelab.roce.agent": "agents",
    "rocelab.roce.verbs": "agents", "rocelab.train.worker": "agents",
    "rocelab.runtime": "runtime", "rocelab.probes": "runtime", "rocelab.traffic.job": "runtime",
    "rocelab.fabric.lab": "runtime", "rocelab.train.runner": "runtime",
    "rocelab.reporting": "reporting",
    "rocelab.tasks": "front door", "rocelab.cli": "front door", "rocelab.__main__": "front door",
    "rocelab.pytest_plugin": "front door", "rocelab.dashboard": "front door", "rocelab.nodecli": "front door",
}


def modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def layer(module: str) -> str:
    best = max((prefix for prefix in RULES if module == prefix or module.startswith(prefix + ".")), key=len)
    return RULES[best]


def imports(path: Path, known: set[str]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {name for name in out if name in known}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(p, set(mods)) - {m} for m, p in mods.items()}


def test_every_module_has_a_layer():
    assert all(layer(m) in LAYERS for m in modules())


def test_imports_point_down_only():
    upward = [f"{m} ({layer(m)}) imports {d} ({layer(d)})" for m, deps in sorted(graph().items()) for d in sorted(deps)
              if LAYERS.index(layer(d)) > LAYERS.index(layer(m))]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    edges = graph()
    # A package's __init__ importing its own submodules is how a package re-exports: not a cycle
    # with them unless a submodule imports another package's module that leads back.
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges[m]):
            if m.startswith(d + "."):
                continue  # a submodule importing its own package's __init__ (loaded first anyway)
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    assert not cycles, "\n".join(cycles)


@pytest.mark.parametrize("agent", ["rocelab.roce.agent", "rocelab.switch.agent"])
def test_an_agent_loads_neither_the_lab_nor_the_runtime(agent):
    code = (f"import sys, importlib; importlib.import_module({agent!r}); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('rocelab'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}).stdout.split()
    above = [m for m in loaded if LAYERS.index(layer(m)) >= LAYERS.index("model")
             and layer(m) != "agents" and m != agent]
    assert not above, above
