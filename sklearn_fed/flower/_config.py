"""What a Flower run config and node config say, parsed and checked.

Nothing here imports Flower: these are plain mappings (Flower's ``UserConfig``
is a flat dict of str/int/float/bool values).

The **run config** travels with the app to the server and to every node; it
names the estimator and its hyperparameters, never code: the estimator is
looked up by name among sklearn-fed's own protocol estimators and its
parameters are a JSON object, so a run config cannot make a node import or
unpickle anything. The **node config** is set by each site's operator on its
SuperNode: where its rows are, its label, its key and its policy. It never
leaves the node.
"""

import inspect
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator

import sklearn_fed

from .._composite import DATA_FREE
from ..compose import FederatedColumnTransformer
from ..datasets import load_site_data
from ..pipeline import FederatedPipeline
from ..protocol import FederatedMixin, SitePolicy, plain_label
from ..protocol._policy import (
    DEFAULT_MAX_LEVELS,
    DEFAULT_MAX_PARAMETERS_PER_ROW,
    DEFAULT_MIN_COUNT,
    DEFAULT_MIN_ROWS,
)
from ._trust import check_depth

__all__ = [
    "NODE_CONFIG_KEYS",
    "RUN_CONFIG_DEFAULTS",
    "NodeSettings",
    "ServerSettings",
    "estimator_from_config",
    "estimator_to_config",
    "read_keys_file",
    "site_text",
]

#: Every run-config key the apps read, with its default. ``flwr run --run-config``
#: may override only keys listed in the app's ``[tool.flwr.app.config]``, so an
#: app's pyproject.toml lists exactly these.
RUN_CONFIG_DEFAULTS = {
    "estimator": "FederatedRidge",
    "estimator-params": "{}",
    "model-path": "",
    "min-nodes": 1,
    "node-timeout": 60.0,
    "reply-timeout": 300.0,
    "poll-interval": 0.2,
    "keys-file": "",
    "on-invalid": "raise",
    "max-rounds": 0,
    "feature-names": "",
    "node-sites": "",
    "evaluate-model": "",
}

#: Node-config keys a SuperNode may set (``--node-config 'site="a" data-path="..."'``).
NODE_CONFIG_KEYS = (
    "site", "data-path", "target", "features", "weight-column", "round-column", "key-file",
    "min-rows", "max-epsilon", "allowed-features", "allowed-kinds", "columns-in-order",
    "worker-socket",
    # disclosure rules (SitePolicy); absent: the defaults, 0: off
    "min-count", "max-parameters-per-row", "max-levels", "exact-extremes", "exact-scores",
)

_ARRAY_TAG = "ndarray"
#: The dtypes a run config's array may have (what ``dtype.str`` writes for them): a dtype
#: string is never parsed by numpy as given, so "(1099511627776,)f8" (8 TB per element) is
#: refused before anything is allocated.
CONFIG_ARRAY_DTYPES = frozenset(
    np.dtype(name).str for name in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float32", "float64",
    )
)
#: Most values in a run config's array, and deepest nesting of ``estimator-params``.
MAX_CONFIG_ARRAY_SIZE = 1_000_000
MAX_CONFIG_DEPTH = 32
#: A composite's part: ``{"estimator": class name, "params": {changed parameters}}``.
_PART_KEYS = frozenset({"estimator", "params"})


# ------------------------------------------------------------------ estimators
#: Composites a run config may name: their parts are written as nested estimators.
_COMPOSITES = {cls.__name__: cls for cls in (FederatedPipeline, FederatedColumnTransformer)}


def _registry_class(name, *, part=False):
    """The class a run config may name ``name``.

    At the top: a protocol estimator exported by :mod:`sklearn_fed`, or a
    composite (:class:`~sklearn_fed.pipeline.FederatedPipeline`,
    :class:`~sklearn_fed.compose.FederatedColumnTransformer`). As a part of a
    composite (``part=True``) also a data-free transformer (see
    :data:`sklearn_fed._composite.DATA_FREE`). Nothing else can be built.
    """
    cls = getattr(sklearn_fed, name, None) if name in sklearn_fed.__all__ else None
    if not (isinstance(cls, type) and issubclass(cls, FederatedMixin)):
        cls = _COMPOSITES.get(name) or (DATA_FREE.get(name) if part else None)
    if cls is None:
        allowed = "" if not part else f", or a data-free transformer ({', '.join(DATA_FREE)})"
        raise ValueError(
            f"estimator {name!r} is not one of sklearn-fed's protocol estimators; the run "
            "config names a class exported by sklearn_fed that has make_server() (e.g. "
            f"'FederatedRidge'), FederatedPipeline or FederatedColumnTransformer{allowed}."
        )
    return cls


def _encode_value(value, where):
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where} is {value!r}; a run config carries finite numbers only.")
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise TypeError(f"{where} is an array of dtype {value.dtype}; only numbers travel.")
        return {_ARRAY_TAG: _encode_value(value.tolist(), where), "dtype": value.dtype.str}
    if isinstance(value, BaseEstimator):  # a composite's part, checked as the run is read
        name, params = _changed_params(value, part=True)
        return {"estimator": name, "params": params}
    if isinstance(value, (list, tuple)):
        return [_encode_value(item, where) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        if set(value) in ({_ARRAY_TAG, "dtype"}, _PART_KEYS):
            raise TypeError(f"{where} is a dict with the reserved keys of an encoded value.")
        return {key: _encode_value(item, where) for key, item in value.items()}
    raise TypeError(
        f"{where} is a {type(value).__name__}, which a run config cannot carry (JSON "
        "numbers, strings, booleans, lists and arrays only); leave it at its default."
    )


def _decode_array(value, where="run config 'estimator-params'"):
    dtype = value["dtype"]
    if not (isinstance(dtype, str) and dtype in CONFIG_ARRAY_DTYPES):
        raise ValueError(f"{where}: an array's dtype is {str(dtype)[:60]!r}; a run config's "
                         f"arrays have one of {sorted(CONFIG_ARRAY_DTYPES)}.")
    items, size, stack = value[_ARRAY_TAG], 0, [value[_ARRAY_TAG]]
    while stack:  # count the values before numpy allocates anything
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        size += 1
        if size > MAX_CONFIG_ARRAY_SIZE:
            raise ValueError(f"{where}: an array of more than {MAX_CONFIG_ARRAY_SIZE} values.")
        number = isinstance(item, (int, float)) and not isinstance(item, bool)
        if not (number or (isinstance(item, bool) and dtype == "|b1")):
            raise ValueError(f"{where}: an array holds {str(item)[:40]!r}, not a number.")
    try:
        with np.errstate(over="raise", invalid="raise"):
            array = np.array(items, dtype=np.dtype(dtype))
    except (ValueError, TypeError, OverflowError, FloatingPointError) as exc:
        raise ValueError(f"{where}: an array that is not {np.dtype(dtype)} ({exc}).") from None
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError(f"{where}: an array with values beyond {np.dtype(dtype)}.")
    return array


def _decode_value(value):
    if isinstance(value, dict):
        if set(value) == {_ARRAY_TAG, "dtype"}:
            return _decode_array(value)
        if set(value) == _PART_KEYS:
            return _build(value["estimator"], value["params"], part=True)
        return {key: _decode_value(item) for key, item in value.items()}
    if isinstance(value, list):
        items = [_decode_value(item) for item in value]
        # a (name, estimator[, columns]) entry of steps or transformers, as sklearn writes it
        if len(items) in (2, 3) and isinstance(items[0], str) and isinstance(
                items[1], BaseEstimator):
            return tuple(items)
        return items
    return value


def _build(name, params, *, part=False):
    """A new estimator of the class named ``name`` (looked up, never imported) with ``params``."""
    if not isinstance(name, str):
        raise ValueError(  # noqa: TRY004 (a bad run config is a ValueError, as the apps expect)
            f"run config: an estimator must be named by its class, got {name!r}.")
    cls = _registry_class(name, part=part)
    if not isinstance(params, dict):
        raise ValueError(  # noqa: TRY004 (a bad run config is a ValueError)
            f"run config: the parameters of {name} must be a JSON object.")
    try:
        estimator = cls(**_decode_value(params))
    except TypeError as exc:
        raise ValueError(f"run config 'estimator-params' for {name}: {exc}") from exc
    validate = getattr(estimator, "_validate_params", None)
    if validate is not None:
        validate()
    return estimator


def _defaults(cls):
    """A class's default parameters (a required one, such as a pipeline's steps, has none)."""
    try:  # a new instance's are the defaults (also those a skorch net takes as kwargs)
        return cls().get_params(deep=False)
    except TypeError:
        signature = inspect.signature(cls.__init__)
        return {name: p.default for name, p in signature.parameters.items()
                if p.default is not inspect.Parameter.empty}


def _changed_params(estimator, *, part=False):
    """``(class name, {parameter: encoded value})`` of the parameters changed from the defaults."""
    name = type(estimator).__name__
    if _registry_class(name, part=part) is not type(estimator):
        raise ValueError(f"{name} is not sklearn-fed's own {name}; a run config names classes.")
    defaults = _defaults(type(estimator))
    params = {}
    for key, value in estimator.get_params(deep=False).items():
        # skorch lists every attribute not ending in "_", private ones too: not parameters
        if key.startswith("_") or (key in defaults and _is_default(value, defaults[key])):
            continue
        params[key] = _encode_value(value, f"parameter {key!r} of {name}")
    return name, params


def _is_default(value, default):
    if value is default:
        return True
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray):
        return False
    try:
        return type(value) is type(default) and bool(value == default)
    except Exception:  # noqa: BLE001 (a value whose == is not a plain bool is simply sent)
        return False


def estimator_to_config(estimator):
    """The run-config entries that name ``estimator``'s class and hyperparameters.

    Only parameters changed from the class defaults are written, as a JSON
    object (arrays as ``{"ndarray": [...], "dtype": "<f8"}``).

    Parameters
    ----------
    estimator : estimator
        One of sklearn-fed's protocol estimators (fitted or not).

    Returns
    -------
    config : dict
        ``{"estimator": class name, "estimator-params": JSON text}``.

    Examples
    --------
    >>> from sklearn_fed import FederatedRidge
    >>> estimator_to_config(FederatedRidge(alpha=0.5))
    {'estimator': 'FederatedRidge', 'estimator-params': '{"alpha": 0.5}'}
    """
    name, params = _changed_params(estimator)
    return {"estimator": name, "estimator-params": json.dumps(params, sort_keys=True)}


def estimator_from_config(run_config):
    """A new, unfitted estimator from a run config's ``estimator`` and ``estimator-params``.

    Parameters
    ----------
    run_config : mapping
        Flower's ``context.run_config``.

    Returns
    -------
    estimator : estimator
        Its parameters are validated against the class's constraints.

    Examples
    --------
    >>> estimator_from_config({"estimator": "FederatedRidge",
    ...                        "estimator-params": '{"alpha": 0.5}'})
    FederatedRidge(alpha=0.5)
    """
    name = run_config.get("estimator", RUN_CONFIG_DEFAULTS["estimator"])
    if not isinstance(name, str):
        raise ValueError(  # noqa: TRY004 (a bad run config is a ValueError)
            f"run config 'estimator' must be a class name, got {name!r}.")
    _registry_class(name)  # an unknown name is refused before its parameters are read
    text = run_config.get("estimator-params", RUN_CONFIG_DEFAULTS["estimator-params"]) or "{}"
    try:
        params = json.loads(text)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"run config 'estimator-params' is not valid JSON: {exc}") from None
    if not isinstance(params, dict):
        raise ValueError(  # noqa: TRY004 (a bad run config is a ValueError)
            "run config 'estimator-params' must be a JSON object.")
    check_depth(params, "run config 'estimator-params'", limit=MAX_CONFIG_DEPTH)
    return _build(name, params)


# ------------------------------------------------------------------ settings
def site_text(label):
    """How a site label is written in a keys file: a string as is, else its JSON.

    Examples
    --------
    >>> site_text("north"), site_text(3)
    ('north', '3')
    """
    return label if isinstance(label, str) else json.dumps(plain_label(label))


def read_keys_file(path):
    """Site keys from a JSON file ``{"<site>": "<key, at least 16 characters>"}``.

    Returns
    -------
    keys : dict
        Site text (see :func:`site_text`) -> key bytes.
    """
    try:
        keys = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"keys file {path}: {exc}") from exc
    if not (isinstance(keys, dict) and all(isinstance(v, str) for v in keys.values())):
        raise ValueError(f"keys file {path}: expected a JSON object of site -> key text.")
    return {site: key.encode("utf-8") for site, key in keys.items()}


def _texts(config, *keys):
    """``{field: text}`` of ``keys`` (absent: empty), each field named as its key."""
    return {key.replace("-", "_"): str(config.get(key, "")) for key in keys}


def _number(config, key, default, kind, minimum):
    value = config.get(key, default)
    if kind is float and type(value) is int:
        value = float(value)
    if type(value) is not kind or not value >= minimum:
        raise ValueError(f"{key} must be a {kind.__name__} >= {minimum}; got {value!r}.")
    return value


def _flag(config, key):
    value = config.get(key, False)
    if value in ("true", "false"):  # as a shell or a TOML file may write it
        value = value == "true"
    if type(value) is not bool:
        raise ValueError(f"{key} must be true or false; got {value!r}.")
    return value


@dataclass(frozen=True)
class ServerSettings:
    """The server app's run-config settings (see :data:`RUN_CONFIG_DEFAULTS`).

    Examples
    --------
    >>> ServerSettings.from_run_config({"min-nodes": 3}).min_nodes
    3
    """

    model_path: str
    min_nodes: int
    node_timeout: float
    reply_timeout: float
    poll_interval: float
    keys_file: str
    on_invalid: str
    max_rounds: int
    feature_names: tuple
    node_sites: dict
    evaluate_model: str = ""

    @classmethod
    def from_run_config(cls, config):
        on_invalid = config.get("on-invalid", RUN_CONFIG_DEFAULTS["on-invalid"])
        if on_invalid not in ("raise", "drop"):
            raise ValueError(f"on-invalid must be 'raise' or 'drop'; got {on_invalid!r}.")
        names = config.get("feature-names", "") or None
        if names is not None:
            names = json.loads(names)
            if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
                raise ValueError("feature-names must be a JSON list of strings.")
            names = tuple(names)
        node_sites = json.loads(config.get("node-sites", "") or "{}")
        if not (isinstance(node_sites, dict) and all(
                key.isdigit() and isinstance(v, (str, int)) and not isinstance(v, bool)
                for key, v in node_sites.items())):
            raise ValueError("node-sites must be a JSON object {\"<node id>\": <site label>}.")
        return cls(
            **_texts(config, "model-path", "keys-file", "evaluate-model"),
            min_nodes=_number(config, "min-nodes", 1, int, 1),
            node_timeout=_number(config, "node-timeout", 60.0, float, 0.0),
            reply_timeout=_number(config, "reply-timeout", 300.0, float, 0.0),
            poll_interval=_number(config, "poll-interval", 0.2, float, 0.01),
            on_invalid=on_invalid,
            max_rounds=_number(config, "max-rounds", 0, int, 0),
            feature_names=names,
            node_sites={int(key): label for key, label in node_sites.items()},
        )

    def server_kwargs(self):
        """Keyword arguments of ``estimator.make_server``."""
        kwargs = {"on_invalid": self.on_invalid}
        if self.keys_file:
            kwargs["keys"] = read_keys_file(self.keys_file)
        if self.max_rounds:
            kwargs["max_rounds"] = self.max_rounds
        if self.feature_names is not None:
            kwargs["feature_names"] = list(self.feature_names)
        return kwargs


@dataclass(frozen=True)
class NodeSettings:
    """A SuperNode's node-config settings: its label, rows, key and policy.

    Examples
    --------
    >>> node = NodeSettings.from_node_config({"site": "north", "data-path": "north.csv",
    ...                                       "target": "y", "max-epsilon": 1.0})
    >>> node.site, node.policy.max_epsilon
    ('north', 1.0)
    """

    site: object
    data_path: str
    target: str
    features: str
    weight_column: str
    round_column: str
    key_file: str
    policy: SitePolicy

    @classmethod
    def from_node_config(cls, config):
        unknown = sorted(set(config) - set(NODE_CONFIG_KEYS))
        if unknown:
            raise ValueError(
                f"unknown node-config keys {unknown}; known: {list(NODE_CONFIG_KEYS)}."
            )
        site = config.get("site")
        if not isinstance(site, (str, int)) or isinstance(site, bool) or site == "":
            raise ValueError(f"node config needs site= (a string or an integer); got {site!r}.")
        if not config.get("data-path"):
            raise ValueError(f"site {site!r}: node config needs data-path=.")

        def listed(key):
            text = config.get(key)
            return None if not text else [p.strip() for p in str(text).split(",") if p.strip()]

        def rule(key, default, kind):  # absent: SitePolicy's default; 0: the rule is off
            return _number(config, key, default, kind, 0) or None

        max_epsilon = config.get("max-epsilon")
        policy = SitePolicy(
            min_rows=rule("min-rows", DEFAULT_MIN_ROWS, int),
            min_count=rule("min-count", DEFAULT_MIN_COUNT, int),
            max_parameters_per_row=rule("max-parameters-per-row",
                                        DEFAULT_MAX_PARAMETERS_PER_ROW, float),
            max_levels=rule("max-levels", DEFAULT_MAX_LEVELS, int),
            exact_extremes=_flag(config, "exact-extremes"),
            exact_scores=_flag(config, "exact-scores"),
            max_epsilon=None if max_epsilon is None else _number(config, "max-epsilon", 0.0,
                                                                 float, 0.0),
            allowed_features=listed("allowed-features"),
            allowed_kinds=listed("allowed-kinds"),
            columns_in_order=_flag(config, "columns-in-order"),
        )
        return cls(site=site, policy=policy, **_texts(
            config, "data-path", "target", "features", "weight-column", "round-column", "key-file"))

    def read_key(self):
        """The site's key (bytes), or None when the node has no key file."""
        if not self.key_file:
            return None
        try:
            return Path(self.key_file).read_bytes().strip()
        except OSError as exc:
            raise ValueError(f"site {self.site!r}: cannot read key-file: {exc}") from exc

    def read_data(self, in_round=None):
        """``(X, y, sample_weight)`` from ``data-path`` (``round-column``: one round's rows)."""
        try:
            return load_site_data(
                self.data_path,
                target=self.target or None,
                features=self.features or None,
                weight=self.weight_column or None,
                round_column=self.round_column or None,
                in_round=in_round,
            )
        except (OSError, ValueError) as exc:
            raise ValueError(f"site {self.site!r}: {exc}") from exc
