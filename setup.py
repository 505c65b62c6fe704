"""rocelab's build hook.

switchd's fast path, rocelab.switch._fastpath (the switch pipeline in C), is built wherever a
C compiler is found; without one the install goes on and switchd runs the Python pipeline
(`optional`). An editable install builds it in place, beside its source.

ROCELAB_COMPILE=1 asks, as well, for the switch core's Python modules (rocelab.switch's pure
modules, the ones switchd runs per frame) compiled with mypyc:

    pip install mypy setuptools wheel && ROCELAB_COMPILE=1 pip install --no-build-isolation .

A compiled module sits beside its source and is imported in its place; the source stays
the reference (tests/unit/test_switch_compiled.py compares the two). Not for an editable
install: there a compiled module would go on shadowing its source after an edit.
"""

import os

from setuptools import Extension, setup

COMPILED_CORE = ["pipeline", "mmu", "scheduler", "shaper", "wred", "pfc", "fib", "frames", "counters"]


FASTPATH = Extension("rocelab.switch._fastpath", ["src/rocelab/switch/_fastpath.c"], optional=True,
                     extra_compile_args=["-O2", "-std=c11", "-Wall"])


def ext_modules() -> list:
    if os.environ.get("ROCELAB_COMPILE") != "1":
        return [FASTPATH]
    from mypyc.build import mypycify

    return [FASTPATH, *mypycify(["--ignore-missing-imports", "--follow-imports=silent", "--check-untyped-defs",
                                 *(f"src/rocelab/switch/{m}.py" for m in COMPILED_CORE)],
                                group_name="rocelab_switch_core")]


setup(ext_modules=ext_modules())
