"""The probe's child process: `Probe.start()` runs it; see rocelab.probes.capture."""

import sys

from rocelab.probes.capture import child_main

sys.exit(child_main(sys.argv[1:]))
