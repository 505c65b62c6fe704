"""rocelab's tasks for `invoke`: the same collection the `rocelab` console script runs."""

from rocelab.tasks import ns  # noqa: F401  (invoke looks for `ns`)
