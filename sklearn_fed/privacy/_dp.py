"""Lazy imports of the optional dependencies of :mod:`sklearn_fed.privacy`."""

import importlib


def import_optional(module, package, extra):
    """Import ``module`` or raise an ImportError naming the ``package`` and the ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            f"This feature needs the '{package}' package; install it with "
            f"pip install 'sklearn-fed[{extra}]'."
        ) from exc
