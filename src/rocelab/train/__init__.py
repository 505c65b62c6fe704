"""A real (tiny) training job across the fabric: PyTorch DistributedDataParallel over
gloo, one worker per host, inside the hosts' namespaces (`pip install rocelab[train]`).

core: the pure parts (spec, bytes accounting, progress lines, stall detection);
runner: starts and watches the workers; worker: what runs in each host (imports torch).
"""
