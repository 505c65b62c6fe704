"""The C core built with -Werror and AddressSanitizer/UndefinedBehaviorSanitizer, running the
generated traces, the recorded traces and the malformed-frame fuzz.

The test copies src/ to a temporary folder, builds rocelab.switch._fastpath there with
SANITIZE_CFLAGS (a warning fails the build; an out-of-bounds access, a use after free or
undefined behaviour aborts the run with the sanitizer's report), and runs those tests in a
child pytest on that copy, the interpreter started with libasan preloaded (CPython is not
built with ASan; its own leaks are not reported). By hand, from the checkout:

    pytest -m sanitizer tests/unit

It was checked to fail: with receive_mac_control's memcpy into its 60-byte stack buffer made
one byte longer, the child run stops at the first PFC frame with ASan's stack-buffer-overflow
report, which this test prints.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SANITIZE_CFLAGS = "-Werror -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
SANITIZE_LDFLAGS = "-fsanitize=address,undefined"
TESTS = ["tests/unit/test_switch_traces.py", "tests/unit/test_switch_fastpath.py", "tests/unit/test_switch_frames.py",
         "tests/unit/test_switch_balance.py"]


def libasan() -> str | None:
    compiler = shutil.which("gcc")
    if not compiler:
        return None
    path = subprocess.run([compiler, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


@pytest.mark.sanitizer
@pytest.mark.slow
def test_the_c_core_is_clean_under_asan_and_ubsan(tmp_path):
    asan = libasan()
    if asan is None:
        pytest.skip("no gcc with libasan here: the sanitizer build needs both")
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.egg-info"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp_path,
                           capture_output=True, text=True,
                           env={**os.environ, "CFLAGS": SANITIZE_CFLAGS, "LDFLAGS": SANITIZE_LDFLAGS})
    built = list((tmp_path / "src/rocelab/switch").glob("_fastpath*.so"))
    assert build.returncode == 0 and built, f"the sanitizer build failed:\n{build.stdout[-3000:]}{build.stderr[-3000:]}"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src"), "LD_PRELOAD": asan,
           "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1", "HYPOTHESIS_PROFILE": "dev"}
    # --capture=sys: a sanitizer writes its report on fd 2 as it aborts, which fd capture would lose.
    run = subprocess.run([sys.executable, "-m", "pytest", *TESTS, "-q", "-p", "no:cacheprovider", "--capture=sys",
                          "-m", "not sanitizer", "--deselect",
                          "tests/unit/test_switch_traces.py::test_the_generated_traces_reach_every_stage"],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, f"{run.stdout[-6000:]}{run.stderr[-6000:]}"
    assert f"{tmp_path}/src/rocelab/switch/_fastpath" in subprocess.run(
        [sys.executable, "-c", "import rocelab.switch._fastpath as f; print(f.__file__)"], env=env,
        capture_output=True, text=True).stdout, "the child run did not load the sanitized build"
