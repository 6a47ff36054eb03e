"""Reproductions of the source papers' tables and figures, runnable as a CLI.

Each experiment is a module of this package listed in :data:`EXPERIMENTS`
that defines ``DESCRIPTION`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Run one with ``python -m sklearn_fed.experiments NAME``
or ``sklearn-fed reproduce NAME``; ``--help`` lists them.
"""

# name -> module (relative to this package); imported only when run.
EXPERIMENTS = {
    "fedmpdd": "fedmpdd",
    "feddelta": "feddelta",
    "fesc": "fesc",
    "oneshot-figure3": "oneshot",
    "oneshot-table2": "oneshot",
    "oneshot-table3": "oneshot",
    "oneshot-table4": "oneshot",
    "oneshot-table6": "oneshot",
    "oneshot-table5": "oneshot_privacy",
    "oneshot-table7": "oneshot_projection",
}

__all__ = ["EXPERIMENTS"]
