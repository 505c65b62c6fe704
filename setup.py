"""rocelab's build hook: pure Python unless ROCELAB_COMPILE=1 asks for the switch core
(rocelab.switch's pure modules, the ones switchd runs per frame) compiled with mypyc:

    pip install mypy setuptools wheel && ROCELAB_COMPILE=1 pip install --no-build-isolation .

A compiled module sits beside its source and is imported in its place; the source stays
the reference (tests/unit/test_switch_compiled.py compares the two). Not for an editable
install: there a compiled module would go on shadowing its source after an edit.
"""

import os

from setuptools import setup

COMPILED_CORE = ["pipeline", "mmu", "scheduler", "shaper", "wred", "pfc", "fib", "frames", "counters"]


def ext_modules() -> list:
    if os.environ.get("ROCELAB_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    return mypycify(["--ignore-missing-imports", "--follow-imports=silent", "--check-untyped-defs",
                     *(f"src/rocelab/switch/{m}.py" for m in COMPILED_CORE)], group_name="rocelab_switch_core")


setup(ext_modules=ext_modules())
