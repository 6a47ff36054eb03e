"""Reproductions of the source papers' tables and figures (not part of the installed package).

They need matplotlib and tqdm, read data from a path you give, and reach into
a few private helpers of :mod:`sklearn_fed` to print intermediate quantities,
so they live beside the package, not in it. Run them from the repository
root::

    python -m reproductions --help            # the list, one line each
    python -m reproductions NAME --help       # the options of one
    python -m reproductions NAME --quick --out DIR

Each experiment is a module of this package listed in :data:`EXPERIMENTS`
that defines ``DESCRIPTION`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``.
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
