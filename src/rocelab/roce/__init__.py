"""The emulated RoCE NIC's pure core: RoCEv2 RC transport, DCQCN, PFC; no I/O.

Modules, bottom up: `icrc` and `wire` (frames), `dcqcn` and `cc` (congestion control
by name), `config` (NicConfig, dilate), `qp` (queue pairs), `nic` (the NIC object the
nicd shell drives), `sim` (an in-memory fabric for tests and benchmarks).
"""

from rocelab.roce.cc import CcConfig, CcRegistry, builtin_cc_registry
from rocelab.roce.config import NicConfig, dilate
from rocelab.roce.dcqcn import DcqcnConfig
from rocelab.roce.nic import Nic
from rocelab.roce.qp import MemoryRegion, QpState, WcOpcode, WcStatus, WorkCompletion

__all__ = [
    "CcConfig", "CcRegistry", "DcqcnConfig", "MemoryRegion", "Nic", "NicConfig", "QpState",
    "WcOpcode", "WcStatus", "WorkCompletion", "builtin_cc_registry", "dilate",
]
