"""Probes: scapy observers on any lab interface.

A probe captures on one interface inside a node's network namespace and counts what a
lossless fabric does there: ECN CE marks per flow, CNPs per QP, PFC frames per priority
(XOFF and XON apart, with pause quanta and direction), RoCE PSN gaps, go-back-N rewinds,
ACKs and NAKs. It reports JSON (rocelab.reporting.probe renders it), and can write a pcap that tshark decodes.

    with Probe("lab-pfc.leaf1", "eth1", pcap="leaf1-eth1.pcap") as probe:
        ...drive traffic...
    probe.report.totals["pfc_xoff"], decode_pcap("leaf1-eth1.pcap", probe.mac)
"""

from rocelab.probes.capture import Probe, ProbeError, decode_pcap
from rocelab.probes.tally import Flow, FlowCount, PfcCount, PfcKey, ProbeReport, QpCount, QpKey, Tally

__all__ = ["Flow", "FlowCount", "PfcCount", "PfcKey", "Probe", "ProbeError", "ProbeReport", "QpCount", "QpKey", "Tally",
           "decode_pcap"]
