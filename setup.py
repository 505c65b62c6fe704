"""rocelab's build hook.

switchd's fast path, rocelab.switch._fastpath (the switch pipeline and the agents' loop in C),
is built wherever a C compiler is found; without one the install goes on and switchd runs the
Python pipeline (`optional`). An editable install builds it in place, beside its source.
"""

from setuptools import Extension, setup

FASTPATH = Extension("rocelab.switch._fastpath", ["src/rocelab/switch/_fastpath.c"], optional=True,
                     extra_compile_args=["-O2", "-std=c11", "-Wall"])

setup(ext_modules=[FASTPATH])
