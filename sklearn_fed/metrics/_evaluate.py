"""Evaluating a fitted model across sites: one round, each site sends the sums of its rows.

The server sends the fitted model (see :mod:`._ship`) and the metrics; each
site predicts its own rows and answers with the sums the metrics need (see
:mod:`._stats`); the server checks and merges them and computes every metric
pooled over all sites' rows and per site.
"""

import numbers
import types
import warnings
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, is_classifier
from sklearn.utils import _safe_indexing
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import _num_samples, check_is_fitted

from .._clients import group_rows_by_client, take_clients
from .._compat import _check_sample_weight
from ..protocol import (
    Client,
    CountedTable,
    FederatedMixin,
    InvalidClientMessage,
    ScoreBins,
    Server,
    atomic,
    decode_values,
    encode_values,
    match_columns,
    run_simulation,
    sorted_labels,
)
from ..protocol._errors import failing
from ..protocol._fields import server_error
from ._ship import load_model_state, model_state
from ._stats import (
    METRICS,
    SiteStats,
    merge_stats,
    metric_kinds,
    parse_metric,
    scores_from,
    site_stats,
)

__all__ = ["FederatedEvaluator", "federated_score"]


def default_metric(estimator):
    """scikit-learn's ``score``: accuracy for a classifier, R² otherwise."""
    return "accuracy" if is_classifier(estimator) else "r2"


def _n_outputs(model):
    coef = getattr(model, "coef_", None)
    if isinstance(coef, np.ndarray) and coef.ndim == 2 and not is_classifier(model):
        return int(coef.shape[0])
    n_outputs = getattr(model, "n_outputs_", 1)
    return int(n_outputs) if isinstance(n_outputs, numbers.Integral) else 1


def evaluation_task(model, metrics, pos_label, score_decimals):
    """``(fields, arrays, spec)`` of an evaluation task for ``model``, ``spec`` as a site reads it.

    The model's classes travel only when a metric reads labels.
    """
    spec = {"kinds": metric_kinds(metrics), "score_decimals": score_decimals,
            "n_outputs": _n_outputs(model)}
    spec_arrays = {}
    if any(METRICS[parse_metric(m)[0]][1] for m in metrics):
        classes = getattr(model, "classes_", None)
        if classes is None:
            raise ValueError(f"metrics {list(metrics)} need a classifier with classes_.")
        classes = np.asarray(classes)
        if pos_label is None:
            pos_index = 1 if len(classes) == 2 else 0
        else:
            found = np.flatnonzero(classes == pos_label)
            if len(found) != 1:
                raise ValueError(f"pos_label={pos_label!r} is not one of {classes.tolist()}.")
            pos_index = int(found[0])
        spec.update(classes=encode_values(classes, "classes", spec_arrays), pos_index=pos_index)
    fields, state_arrays = model_state(model)
    arrays = {f"c.{k}": v for k, v in spec_arrays.items()}
    arrays.update({f"m.{k}": v for k, v in state_arrays.items()})
    return ({"model_class": type(model).__name__, "model": fields, "spec": spec}, arrays,
            read_spec(spec, spec_arrays, server_error))


def read_spec(spec, arrays, fail):
    """The spec of :func:`evaluation_spec` read back at a site (untrusted)."""
    if not isinstance(spec, dict):
        fail("malformed evaluation spec.")
    kinds = spec.get("kinds")
    if not (isinstance(kinds, list) and set(kinds) <= {"reg", "cm", "proba", "rank"}):
        fail("malformed evaluation spec.")
    decimals = spec.get("score_decimals")
    if not (decimals is None or (type(decimals) is int and 0 <= decimals <= 15)):
        fail("score_decimals must be None or an int in [0, 15].")
    n_outputs = spec.get("n_outputs")
    if not (type(n_outputs) is int and 1 <= n_outputs <= 2**20):
        fail("n_outputs must be a positive int.")
    out = {"kinds": kinds, "score_decimals": decimals, "n_outputs": n_outputs}
    if "classes" in spec:
        classes = decode_values(spec["classes"], arrays, fail)
        pos_index = spec.get("pos_index")
        if not (len(classes) >= 1 and type(pos_index) is int and 0 <= pos_index < len(classes)):
            fail("malformed classes or pos_index.")
        if len(classes) > 1 and not (classes[1:] > classes[:-1]).all():
            fail("the classes must be sorted and distinct.")
        out.update(classes=classes, pos_index=pos_index)
    elif {"cm", "proba", "rank"} & set(kinds):
        fail("label metrics need the model's classes.")
    return out


def site_rows(X, y, sample_weight, schema, site):
    """A site's rows matched to the model's features by name; the model validates values."""
    X, names = match_columns(X, schema, site=site)
    try:
        n_rows = _num_samples(X)
        if n_rows == 0:
            raise ValueError("the site has no rows to evaluate.")
        y = np.asarray(y)
        if y.ndim not in (1, 2) or y.shape[0] != n_rows:
            raise ValueError(f"X has {n_rows} rows but y has shape {y.shape}.")
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, np.empty((n_rows, 0)), dtype=np.float64,
                ensure_non_negative=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"site {site!r}: {exc}") from exc
    return X, y, sample_weight, names


def answer_evaluation(template, fields, arrays, X, y, sample_weight, site):
    """``(fields, arrays)`` of a site's sums for an evaluation task (also nested in a search)."""
    if type(fields.get("model_class")) is not str or fields["model_class"] != type(
            template).__name__:
        server_error(f"the task evaluates a {fields.get('model_class')!r}; this site runs "
                      f"{type(template).__name__}.")
    spec_arrays = {k[2:]: v for k, v in arrays.items() if k.startswith("c.")}
    spec = read_spec(fields.get("spec"), spec_arrays, server_error)
    model_arrays = {k[2:]: v for k, v in arrays.items() if k.startswith("m.")}
    try:
        model = load_model_state(template, fields.get("model"), model_arrays)
    except AttributeError as exc:
        raise InvalidClientMessage(f"server: the fitted model cannot be set: {exc}",
                                   "server") from exc
    try:
        return site_stats(model, X, y, sample_weight, spec)
    except (TypeError, ValueError, AttributeError, IndexError) as exc:
        raise ValueError(f"site {site!r}: cannot evaluate the model on its rows: {exc}") from exc


def screened_evaluation(template, fields, arrays, X, y, sample_weight, site, policy):
    """:func:`answer_evaluation` with ``policy``'s disclosure rules applied, as an evaluator's
    own reply would be (a search's scoring parts: the same sums, the same rules)."""
    reply = types.SimpleNamespace()
    reply.fields, reply.arrays = answer_evaluation(template, fields, arrays, X, y,
                                                   sample_weight, site)
    EvaluatorClient(None).screen(policy, types.SimpleNamespace(site=site, fields={}), reply, X,
                                 None)
    return reply.fields, reply.arrays


#: What an evaluation's reply is made of, for the site's disclosure rules (see
#: :doc:`/disclosure`): the confusion matrix is a table of counts (no cell of 1 or 2
#: rows), the ROC table counts rows at each distinct score (merged into bins).
EVALUATION_DISCLOSURE = (
    CountedTable("cm_counts", "confusion matrix",
                 "Evaluate on more rows per site (fewer folds), or with metrics read from "
                 "sums (log_loss, brier_score)."),
    ScoreBins("scores", ("pos_counts", "neg_counts"), ("pos_weights", "neg_weights"),
              "Evaluate on more rows per site (fewer folds), or with metrics read from "
              "sums (log_loss, brier_score)."),
)


class EvaluatorClient(Client):
    """A site: predicts its rows with the server's model and sends the metrics' sums."""

    protocol = "metrics.evaluate"
    y_numeric = False
    disclosure = EVALUATION_DISCLOSURE

    def released_parameters(self, task, frame):
        return None  # it fits no model: the parameters-per-row rule does not apply

    def check_rows(self, X, y, sample_weight, schema, site):
        return site_rows(X, y, sample_weight, schema, site)

    def compute(self, task, X, y, sample_weight, rows):
        if rows is not None:
            X, y = _safe_indexing(X, rows), y[rows]
            sample_weight = None if sample_weight is None else sample_weight[rows]
        return answer_evaluation(self.estimator.estimator, task.fields, task.arrays, X, y,
                                 sample_weight, task.site)


class EvaluatorServer(Server):
    """The server: one round; merges the sites' sums and computes every metric."""

    protocol = "metrics.evaluate"

    def __init__(self, estimator, **kwargs):
        model = estimator.estimator
        check_is_fitted(model)
        names = getattr(model, "feature_names_in_", None)
        if kwargs.get("feature_names") is None and names is not None:
            kwargs["feature_names"] = [str(name) for name in names]
        elif kwargs.get("n_features") is None and hasattr(model, "n_features_in_"):
            kwargs["n_features"] = int(model.n_features_in_)
        super().__init__(estimator, **kwargs)
        self.metrics = estimator._metric_names()
        # an unknown metric name is refused here, before any site computes
        self._fields, self._arrays, self.spec = evaluation_task(
            model, self.metrics, estimator.pos_label, estimator.score_decimals)

    def plan(self, sites):
        if self.round > 0:
            return {}
        return {site: (dict(self._fields), dict(self._arrays)) for site in sites}

    def read_reply(self, site, frame):
        return SiteStats.read(frame.fields, frame.arrays, self.spec, failing(site))

    def apply(self, replies, ledger):
        estimator = self.estimator
        sites = sorted_labels(replies)
        params = estimator._metric_params()
        pooled = scores_from(merge_stats(replies[s] for s in sites), self.metrics, self.spec,
                             params)
        per_site = {}
        with warnings.catch_warnings():
            # one site's rows alone often lack a class: its scores say so (NaN, 0), quietly
            warnings.simplefilter("ignore")
            for site in sites:
                try:
                    per_site[site] = scores_from(replies[site], self.metrics, self.spec, params)
                except ValueError:  # undefined at that site alone (one class only): NaN
                    per_site[site] = {name: float("nan") for name in self.metrics}
        estimator.scores_ = pooled
        estimator.site_scores_ = per_site
        estimator.n_samples_ = sum(replies[s].n_rows for s in sites)
        estimator.clients_ = np.array(sites, dtype=object)
        estimator.n_clients_ = len(sites)
        estimator.communication_ = ledger


class InProcessFitMixin:
    """``fit`` of a meta-protocol (an evaluation, a search): its roles run in process, one
    simulated site per ``clients`` label (:func:`run_in_process`)."""

    def _in_process_server_kwargs(self, names):
        """What the server is told of an in-process run's rows (their column ``names``)."""
        return {}

    @atomic
    def fit(self, X, y, sample_weight=None, clients=None):
        """Run this protocol on rows split among sites by ``clients`` (in process).

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
            Used by every fit and score the protocol makes.
        clients : array-like of shape (n_samples,), default=None
            Site label of each row; None: one site.

        Returns
        -------
        self
            Fitted (``scores_`` of an evaluator, ``cv_results_`` of a search).
        """
        self._validate_params()
        run_in_process(self, X, y, sample_weight, clients)
        return self


class FederatedEvaluator(InProcessFitMixin, FederatedMixin, BaseEstimator):
    """Scores of a fitted model over rows that stay at their sites, pooled and per site.

    One round: the server sends the fitted model's state and the metrics;
    each site predicts its own rows and sends the sums the metrics need; the
    server merges them. The pooled scores equal :mod:`sklearn.metrics` on the
    pooled rows: exactly for metrics read from counts (accuracy, the
    confusion matrix, precision, recall, F1, ROC AUC and average precision
    without sample weights), to round-off for sums (R², errors, log-loss,
    Brier, anything weighted). It is a protocol like the estimators', so it
    runs in process (:meth:`fit`), over bytes, or on Flower (name it in the
    run config with ``evaluate-model``, see :doc:`/user_guide/evaluation`).
    Deployed sites apply their disclosure rules to their replies
    (:class:`~sklearn_fed.protocol.SitePolicy`, see :doc:`/disclosure`): a
    confusion matrix with a cell of 1 to ``min_count - 1`` rows is refused, and
    ROC AUC and average precision read scores merged into bins of
    ``min_count`` rows per class (exact on those bins) unless the site sets
    ``exact_scores``; ``fit``'s simulated sites release exactly.

    Parameters
    ----------
    estimator : estimator
        The fitted model (any estimator whose fitted state is arrays, numbers
        and text, and sklearn-fed's pipelines and transformers). At a
        Flower site, an unfitted copy: the server's fitted state is set on it.
    metrics : str or list of str, default=None
        Names from :data:`METRICS` (``"r2"``, ``"mean_squared_error"``,
        ``"root_mean_squared_error"``, ``"mean_absolute_error"``, ``"accuracy"``,
        ``"balanced_accuracy"``, ``"confusion_matrix"``, ``"precision"``,
        ``"recall"``, ``"f1"``, ``"log_loss"``, ``"brier_score"``, ``"roc_auc"``,
        ``"average_precision"``) or scikit-learn scorer names
        (``"neg_log_loss"``, ``"f1_macro"``...). None: the estimator's
        ``score`` (accuracy or R²).
    average : {"binary", "micro", "macro", "weighted"}, default="binary"
        For precision, recall and F1, as in scikit-learn.
    pos_label : label, default=None
        The positive class of binary metrics; None: ``classes_[1]``.
    multioutput : {"uniform_average", "raw_values"}, default="uniform_average"
        For regression metrics of several outputs.
    zero_division : {"warn", 0.0, 1.0, nan}, default="warn"
        As in scikit-learn's precision, recall and F1.
    beta : float, default=1.0
        Weight of recall in F-beta (the ``"f1"`` metric).
    score_decimals : int, default=None
        Sites round their scores to this many decimals before counting them
        for ROC AUC and average precision: the server then learns counts on
        that grid only, and the result equals scikit-learn's on the rounded
        scores. None: exact scores (each site's distinct scores are revealed).

    Attributes
    ----------
    scores_ : dict
        Metric name -> value on the pooled rows of every site.
    site_scores_ : dict
        Site -> {metric name -> value} on that site's rows alone (NaN where
        a metric is undefined on one site, e.g. ROC AUC with one class).
    n_samples_ : int
        Rows evaluated.
    clients_ : ndarray of shape (n_clients_,)
        Sites that answered.
    n_clients_ : int
    communication_ : CommunicationLedger
        Bytes actually sent.

    See Also
    --------
    federated_score : The pooled score of one metric, in one call.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.metrics import roc_auc_score
    >>> from sklearn_fed import FederatedLogisticRegression
    >>> from sklearn_fed.metrics import FederatedEvaluator
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> sites = np.arange(len(y)) % 4
    >>> model = FederatedLogisticRegression().fit(X, y, clients=sites)
    >>> ev = FederatedEvaluator(model, metrics=["accuracy", "roc_auc"]).fit(X, y, clients=sites)
    >>> round(ev.scores_["roc_auc"], 4)
    0.9974
    >>> ev.scores_["roc_auc"] == roc_auc_score(y, model.decision_function(X))
    True
    >>> sorted(ev.site_scores_)
    [0, 1, 2, 3]
    """

    _server_role = EvaluatorServer
    _client_role = EvaluatorClient
    #: On Flower the server reads the fitted model from the run config's ``evaluate-model``.
    _evaluates_fitted_model = True
    _parameter_constraints: ClassVar[dict] = {
        "estimator": [HasMethods(["predict"]), None],
        "metrics": [str, list, tuple, None],
        "average": [StrOptions({"binary", "micro", "macro", "weighted", "samples"}), None],
        "pos_label": "no_validation",
        "multioutput": [StrOptions({"uniform_average", "raw_values"})],
        "zero_division": [StrOptions({"warn"}), numbers.Real],
        "beta": [Interval(numbers.Real, 0, None, closed="left")],
        "score_decimals": [Interval(numbers.Integral, 0, 15, closed="both"), None],
    }

    def __init__(self, estimator=None, *, metrics=None, average="binary", pos_label=None,
                 multioutput="uniform_average", zero_division="warn", beta=1.0,
                 score_decimals=None):
        self.estimator = estimator
        self.metrics = metrics
        self.average = average
        self.pos_label = pos_label
        self.multioutput = multioutput
        self.zero_division = zero_division
        self.beta = beta
        self.score_decimals = score_decimals

    def _metric_names(self):
        metrics = self.metrics
        if metrics is None:
            return [default_metric(self.estimator)]
        if isinstance(metrics, str):
            return [metrics]
        metrics = list(metrics)
        if not metrics or len(set(metrics)) != len(metrics):
            raise ValueError(f"metrics must be distinct names; got {metrics!r}.")
        return metrics

    def _metric_params(self):
        if self.multioutput not in ("uniform_average", "raw_values"):
            raise ValueError(f"multioutput must be 'uniform_average' or 'raw_values'; got "
                             f"{self.multioutput!r}.")
        return {"average": self.average, "multioutput": self.multioutput,
                "zero_division": self.zero_division, "beta": self.beta}


def run_in_process(estimator, X, y, sample_weight, clients):
    """The in-process run of a meta-protocol's roles (evaluation, search), one site per label.

    Checks ``clients``, ``y``'s length and the weights here; each site
    validates its own rows as the wrapped estimator does.
    """
    n_samples = _num_samples(X)
    clients = np.zeros(n_samples, dtype=int) if clients is None else take_clients(
        estimator, X, clients)
    X = X if hasattr(X, "iloc") else np.asarray(X) if not hasattr(X, "tocsr") else X.tocsr()
    y = np.asarray(y)
    if y.shape[0] != n_samples:
        raise ValueError(f"X has {n_samples} rows but y has {y.shape[0]}.")
    if sample_weight is not None:
        sample_weight = _check_sample_weight(sample_weight, np.empty((n_samples, 0)),
                                             dtype=np.float64, ensure_non_negative=True)
    labels, rows = group_rows_by_client(clients, n_samples)
    columns = getattr(X, "columns", None)
    names = None  # the string column names of a DataFrame
    if columns is not None and all(isinstance(c, str) for c in columns):
        names = [str(c) for c in columns]
    server = estimator.make_server(**estimator._in_process_server_kwargs(names))
    if names is not None:
        match_columns(X, server.schema)  # the model's features, by name, or a clear error
    return run_simulation(server, estimator.make_client(), X, y, sample_weight, labels, rows,
                          names)


def federated_score(estimator, X, y, *, clients=None, metric=None, sample_weight=None,
                    per_site=False, **params):
    """One metric of a fitted model on rows held at sites: pooled, and per site if asked.

    Parameters
    ----------
    estimator : estimator
        A fitted model.
    X, y : array-like
        Every site's rows, with ``clients`` naming each row's site.
    clients : array-like of shape (n_samples,), default=None
    metric : str, default=None
        See :class:`FederatedEvaluator`; None: the estimator's ``score``.
    sample_weight : array-like of shape (n_samples,), default=None
    per_site : bool, default=False
        Also return ``{site: value}``.
    **params
        Other parameters of :class:`FederatedEvaluator` (``average``, ``pos_label``...).

    Returns
    -------
    score : float or ndarray
        On the pooled rows.
    site_scores : dict
        Only with ``per_site=True``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.metrics import r2_score
    >>> from sklearn_fed import FederatedRidge
    >>> from sklearn_fed.metrics import federated_score
    >>> rng = np.random.default_rng(0)
    >>> X, sites = rng.normal(size=(300, 3)), np.arange(300) % 3
    >>> y = X @ [1.0, 2.0, 0.0] + rng.normal(size=300)
    >>> model = FederatedRidge().fit(X, y, clients=sites)
    >>> score, by_site = federated_score(model, X, y, clients=sites, per_site=True)
    >>> bool(np.isclose(score, r2_score(y, model.predict(X)), rtol=1e-12)), len(by_site)
    (True, 3)
    """
    name = metric if metric is not None else default_metric(estimator)
    evaluator = FederatedEvaluator(estimator, metrics=[name], **params).fit(
        X, y, sample_weight=sample_weight, clients=clients)
    score = evaluator.scores_[name]
    if per_site:
        return score, {site: s[name] for site, s in evaluator.site_scores_.items()}
    return score
