"""Run any sklearn-fed estimator across real sites with Flower.

Needs the ``flower`` extra (``pip install sklearn-fed[flower]``: flwr, skops,
pandas). Importing :mod:`sklearn_fed` never imports Flower; this subpackage
imports it only when a name that needs it is first used.

- :func:`make_client_app`, :func:`make_server_app` (and the ready components
  in :mod:`sklearn_fed.flower.app`): a Flower ClientApp and ServerApp built
  from any estimator's protocol roles; tasks and replies travel as our bytes.
- :func:`run_local_federation`, :class:`LocalFederation`: a SuperLink and one
  SuperNode per site on 127.0.0.1, for tests and demos.
- :func:`save_model`, :func:`load_model`: the fitted model in the skops
  format, loaded without pickle.
- :data:`RUN_CONFIG_DEFAULTS`, :class:`NodeSettings`, :class:`ServerSettings`,
  :func:`estimator_to_config`, :func:`estimator_from_config`: what the run
  config and the node config say.

See :doc:`/deploying_flower`.
"""

import importlib
import importlib.util

__all__ = [
    "RUN_CONFIG_DEFAULTS",
    "LocalFederation",
    "NodeSettings",
    "ServerSettings",
    "estimator_from_config",
    "estimator_to_config",
    "load_model",
    "make_client_app",
    "make_server_app",
    "run_local_federation",
    "run_server",
    "save_model",
]

#: Each module's public names, and what it needs beyond the core package.
_MODULES = {
    "._apps": (("flwr", "skops"), ("make_client_app", "make_server_app", "run_server")),
    "._config": ((), ("RUN_CONFIG_DEFAULTS", "NodeSettings", "ServerSettings",
                      "estimator_from_config", "estimator_to_config")),
    "._local": (("flwr", "skops"), ("LocalFederation", "run_local_federation")),
    "._persist": (("skops",), ("load_model", "save_model")),
}
_WHERE = {name: module for module, (_, names) in _MODULES.items() for name in names}


def _require(module):
    missing = [m for m in _MODULES[module][0] if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"sklearn_fed.flower needs {' and '.join(missing)}; install the extra with "
            "`pip install sklearn-fed[flower]`."
        )


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _require(_WHERE[name])
    return getattr(importlib.import_module(_WHERE[name], __name__), name)


def __dir__():
    return sorted(list(globals()) + __all__)
