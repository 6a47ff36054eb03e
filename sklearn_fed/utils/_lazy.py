"""Subpackages whose names are imported on first use, from modules that need an extra."""

import importlib
import importlib.util
import sys


def lazy_names(package, extra, modules, advice=""):
    """``(__getattr__, __dir__, require)`` of ``package``: ``modules`` is ``{module: (the
    imports it needs, its names)}``; a name is imported when first used, once ``require(module)``
    found those imports (else an ImportError says to install ``extra``)."""
    where = {name: module for module, (_, names) in modules.items() for name in names}

    def require(module):
        missing = [m for m in modules[module][0] if importlib.util.find_spec(m) is None]
        if missing:
            raise ImportError(
                f"{package} needs {' and '.join(missing)}; install the extra with "
                f"`pip install sklearn-fed[{extra}]`{advice}."
            )

    def __getattr__(name):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        require(where[name])
        return getattr(importlib.import_module(where[name], package), name)

    def __dir__():
        return sorted(list(vars(sys.modules[package])) + list(where))

    return __getattr__, __dir__, require
