"""rocelab's build hook.

switchd's fast path, rocelab.switch._fastpath (the switch pipeline and the agents' loop in C:
fastpath_core.c, with no Python in it, and _fastpath.c, its CPython binding), is built wherever
a C compiler is found, warnings as errors; without one the install goes on and switchd runs the
Python pipeline (`optional`). An editable install builds it in place, beside its source.
"""

from setuptools import Extension, setup

SWITCH = "src/rocelab/switch"
FASTPATH = Extension("rocelab.switch._fastpath", [f"{SWITCH}/fastpath_core.c", f"{SWITCH}/_fastpath.c"],
                     depends=[f"{SWITCH}/fastpath_core.h", "src/rocelab/kernel/agent_loop.h"], optional=True,
                     extra_compile_args=["-O2", "-std=c11", "-Wall", "-Werror"])

# The agents' loop around a Python core (nicd's), rocelab.kernel._loop: optional in the same way,
# nicd then runs the Python loop.
LOOP = Extension("rocelab.kernel._loop", ["src/rocelab/kernel/_loop.c"], depends=["src/rocelab/kernel/agent_loop.h"],
                 optional=True,
                 extra_compile_args=["-O2", "-std=c11", "-Wall", "-Werror"])

setup(ext_modules=[FASTPATH, LOOP])
