"""Traffic over the emulated fabric: collective patterns, the plan runner, jobs.

Modules, bottom up: `patterns` (a pattern turns hosts and a size into per-host plans of
plain data), `runner` (executes one host's plan over a NIC's verbs, pure), `host` (the
job operations a NIC agent serves), `spec` (pattern files under traffic/), `job` (the
orchestrator in the CLI process), `report` (numbers and tables of a finished job) and
`sim` (a whole job over NIC cores on the in-memory fabric, for tests and what-ifs).

Nothing is imported here: nicd imports only what it needs, to stay small.
"""
