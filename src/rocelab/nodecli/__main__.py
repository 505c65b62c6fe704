"""`python -m rocelab.nodecli CMD ARGS…`: what the commands on a node shell's PATH run
(`invoke shell NODE` puts them there and names the lab and node in ROCELAB_LAB/ROCELAB_NODE)."""

import os
import sys

from rocelab import nodecli
from rocelab.engines import state as lab_state


def main() -> int:
    lab, node = os.environ.get("ROCELAB_LAB"), os.environ.get("ROCELAB_NODE")
    record = lab_state.load(lab) if lab else None
    if record is None or node is None:
        print(f"{sys.argv[1]}: not on a rocelab node (ROCELAB_LAB/ROCELAB_NODE unset, or the lab is down)",
              file=sys.stderr)
        return 2
    return nodecli.run(record, node, sys.argv[1:])


sys.exit(main())
