"""Collection rules for the doctests in sklearn_fed/ (pytest --doctest-modules)."""

import importlib.util

# sklearn_fed.flower imports Flower; without the flower extra its modules are not collected
# (tests/flower/test_flower.py skips itself with a reason).
collect_ignore_glob = []
if any(importlib.util.find_spec(name) is None for name in ("flwr", "skops")):
    collect_ignore_glob.append("sklearn_fed/flower/*")
