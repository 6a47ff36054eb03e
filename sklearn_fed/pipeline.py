"""FederatedPipeline: a whole pipeline as one protocol, every step fitted where the rows are.

A scikit-learn :class:`~sklearn.pipeline.Pipeline` fits step ``i`` on the
output of steps ``0..i-1``. Federated, that output exists only at the
sites, so each round fits one step: the server broadcasts the fitted models
of the steps before it, every site transforms its own rows through them
and answers the step's task with the step's own client, and the step's
server applies the replies as it would alone. A pipeline of ``k`` one-round
steps takes ``k`` rounds (a classifier adds its rounds); a
:class:`~sklearn_fed.compose.FederatedColumnTransformer` fits all its
transformers in the same rounds.
"""

import functools
import math
import time
import types
from typing import ClassVar

import numpy as np
from sklearn.base import clone
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.utils._available_if import available_if
from sklearn.utils._set_output import _get_output_config
from sklearn.utils._user_interface import _message_with_time

from ._clients import known_labels
from ._composite import (
    FederatedCompositeMixin,
    answer_part,
    broadcast_state,
    check_federated,
    commit_federation,
    exact_part,
    load_fitted,
    make_part_server,
    parse_parts,
    prefixed,
    site_rows,
    take_prefixed,
)
from .base import fit_method
from .privacy._budget import (
    PrivacyBudget,
    PrivacySpentMixin,
    planned_ledger,
    release_parts,
    spent_ledgers,
)
from .privacy._budget import as_budget as _as_budget
from .protocol import Client, Server, match_columns, nest, unnest
from .protocol._fields import reply_error, server_error, task_field

__all__ = ["FederatedPipeline", "make_federated_pipeline"]


def _skipped(step):
    return step is None or (isinstance(step, str) and step == "passthrough")


def output_schema(fitted):
    """The feature schema of ``fitted.transform``'s output: names when it outputs DataFrames."""
    try:
        names = [str(name) for name in fitted.get_feature_names_out()]
    except (AttributeError, ValueError, TypeError):
        return {}
    pandas = _get_output_config("transform", fitted)["dense"] == "pandas"
    return {"feature_names": names if pandas else None, "n_features": len(names)}


class PipelineClient(Client):
    """A site of a :class:`FederatedPipeline` (see the module docstring)."""

    protocol = "pipeline"
    needs_y = False

    def check_rows(self, X, y, sample_weight, schema, site):
        X, names = match_columns(X, schema, site=site)
        try:
            X, y, sample_weight = self.estimator._validate_fit_data(X, y, sample_weight,
                                                                    reset=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"site {site!r}: {exc}") from exc
        return X, y, sample_weight, names

    def compute(self, task, X, y, sample_weight, rows):
        steps = self.estimator.steps
        index = task_field(task, "step", int)
        weighted = task_field(task, "weighted", bool)
        fitted = task.fields.get("fitted")
        if not (0 <= index < len(steps) and isinstance(fitted, list) and len(fitted) == index):
            server_error("malformed pipeline task (step index or fitted models).")
        X, y, sample_weight = site_rows(rows, X, y, sample_weight)
        for j, fields in enumerate(fitted):
            template = steps[j][1]
            if _skipped(template):
                continue
            X = load_fitted(template, fields, take_prefixed(task.arrays, f"f{j}.")).transform(X)
        meta, arrays = answer_part(
            steps[index][1], task.fields.get("task"), task.arrays, "t.", X, y,
            sample_weight if weighted else None, site=task.site, policy=self.policy_in_force(),
        )
        return {"step": index, "reply": meta}, arrays


class PipelineServer(Server):
    """Server of a :class:`FederatedPipeline`: runs each step's server in turn.

    Steps are fitted on copies and committed to the pipeline together when
    the last one is done, so a failed round leaves the pipeline as it was.
    Parameters: see :meth:`FederatedPipeline.make_server`.
    """

    protocol = "pipeline"
    reports_rounds = False  # it prints its steps, as Pipeline does

    def __init__(self, estimator, *, weighted_steps=(), **kwargs):
        super().__init__(estimator, **kwargs)
        estimator._validate_steps()
        last = len(estimator.steps) - 1
        for i, (name, step) in enumerate(estimator.steps):
            check_federated(step, name, transformer=i < last)
        names = {name for name, _ in estimator.steps}
        unknown = set(weighted_steps) - names
        if unknown:
            raise ValueError(f"weighted_steps names unknown steps {sorted(unknown)}.")
        self.weighted_steps = frozenset(weighted_steps)
        # A budget is checked before any step releases anything (from each step's
        # parameters), and charged when the pipeline is fitted.
        self._budget = _as_budget(getattr(estimator, "privacy_budget", None))
        if self._budget is not None:
            self._budget.check(planned_ledger(estimator), "this pipeline's fit")
        self.parts = [step if _skipped(step) else clone(step) for _, step in estimator.steps]
        self._index = -1
        self._part = None  # the server of the step being fitted
        self._broadcasts = []  # (fields, arrays) of each fitted step before it
        self._sites = []

    def plan(self, sites):
        while True:
            if self._part is not None:
                frames = self._part.open_round(sites)
                if frames:
                    return {site: self._wrap(frame) for site, frame in frames.items()}
                self._finish_step()
            if not self._next_step():
                self._commit()
                return {}

    def _next_step(self):
        """Make the server of the next step to fit; False when every step is fitted."""
        self._index += 1
        while self._index < len(self.parts) and _skipped(self.parts[self._index]):
            self._broadcasts.append(None)
            self._index += 1
        if self._index >= len(self.parts):
            return False
        fitted = [p for p in self.parts[: self._index] if not _skipped(p)]
        schema = output_schema(fitted[-1]) if fitted else {
            "feature_names": self.schema.feature_names, "n_features": self.schema.n_features}
        self._step_started = time.perf_counter()
        self._part = make_part_server(
            self.parts[self._index], on_invalid=self.on_invalid, max_message_bytes=self.max_message_bytes, **schema
        )
        return True

    def _finish_step(self):
        fitted = self._part.estimator
        if self.estimator.verbose:  # Pipeline's own line for the step just fitted
            print(_message_with_time(
                "Pipeline", self.estimator._log_message(self._index),
                time.perf_counter() - self._step_started), flush=True)
        self.parts[self._index] = fitted
        if self._index < len(self.parts) - 1:
            self._broadcasts.append(broadcast_state(fitted))
        self._part = None

    def _wrap(self, frame):
        arrays = {}
        fitted = [None if payload is None else prefixed(payload, f"f{j}.", arrays)
                  for j, payload in enumerate(self._broadcasts)]
        name = self.estimator.steps[self._index][0]
        fields = {"step": self._index, "weighted": name in self.weighted_steps,
                  "fitted": fitted, "task": nest(frame, "t.", arrays)}
        return fields, arrays

    def read_reply(self, site, frame):
        fail = functools.partial(reply_error, site)
        fields = frame.fields
        if set(fields) != {"step", "reply"} or fields["step"] != self._index:
            fail(f"expected a reply for step {self._index} of the pipeline.")
        inner = unnest(fields["reply"], frame.arrays, "t.", site=site, fail=fail)
        if set(frame.arrays) != {"t." + name for name in inner.arrays}:
            fail("its arrays do not belong to its step's reply.")
        return inner

    def apply(self, replies, ledger):
        self.dropped_.update(parse_parts({self._index: self._part}, {self._index: replies},
                                         self.on_invalid))
        self._sites = list(known_labels(self._sites, replies))

    def _commit(self):
        estimator = self.estimator
        fitted = types.SimpleNamespace(
            steps=[(name, part) for (name, _), part in zip(estimator.steps, self.parts)])
        by_step, privacy = spent_ledgers(fitted)
        # a pipeline reports privacy when a step is private or a budget is set
        private = self._budget is not None or any(
            "_privacy" in part.__dict__ for _, part in release_parts("", fitted))
        if self._budget is not None:
            self._budget.charge(privacy, "this pipeline's fit")
            delta = self._budget.delta
        else:
            delta = min(sum(d for _, d in by_step.values()), 0.5) if by_step else 0.0
        estimator.steps = fitted.steps
        commit_federation(estimator, self._ledger, self.parts, self._sites)
        for name in ("_privacy", "_privacy_delta", "privacy_spent_by_step_"):
            estimator.__dict__.pop(name, None)
        if private:
            estimator._privacy, estimator._privacy_delta = privacy, delta
            estimator.privacy_spent_by_step_ = {
                name: (part_ledger.epsilon(d) if d > 0 else math.inf, d)
                for name, (part_ledger, d) in by_step.items()}


class FederatedPipeline(FederatedCompositeMixin, PrivacySpentMixin, Pipeline):
    """A :class:`~sklearn.pipeline.Pipeline` of federated steps, fitted as one protocol.

    Every step must be federated (an sklearn_fed estimator, a
    :class:`~sklearn_fed.compose.FederatedColumnTransformer`, another
    FederatedPipeline, or ``"passthrough"``) or data-free (a transformer whose
    fit reads no rows: ``PolynomialFeatures``, ``RangeScaler``, ... see the
    User Guide; every site fits it alike and the server checks a digest of
    each site's fit): no step is ever fitted on pooled rows. ``fit(X, y, clients=...)`` runs the protocol of
    :mod:`sklearn_fed.pipeline` in process: one step at a time, the server
    broadcasts the fitted steps before it, and each site transforms its own
    rows and answers the step's task. The result equals the same pipeline
    of scikit-learn estimators fitted on the pooled rows, and
    ``make_server``/``make_client`` run it across real sites.

    Everything else (``predict``, ``transform``, ``score``, indexing,
    ``set_output``, ``get_feature_names_out``) is Pipeline's own.

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    steps : list of (str, estimator) tuples
        As in :class:`~sklearn.pipeline.Pipeline`.
    transform_input, memory, verbose
        Pipeline's; ``memory`` is not used (steps are fitted on copies,
        then committed together); ``verbose`` prints Pipeline's line as
        each step is fitted.
    privacy_budget : PrivacyBudget or tuple (epsilon, delta), default=None
        The total the private releases of every step may spend: checked
        before any step releases anything, and charged when fitted (a
        :class:`~sklearn_fed.privacy.PrivacyBudget` is shared by the clones a
        search makes, so every candidate is charged to it). A step that is
        not differentially private releases exact statistics: infinite epsilon.

    Attributes
    ----------
    communication_ : CommunicationLedger
        Bytes and rounds of the whole protocol (each step's own ledger has
        its messages without the pipeline's envelope).
    clients_ : ndarray of shape (`n_clients_`,)
    n_clients_ : int
    privacy_spent_ : tuple of (float, float)
        Set when a step is differentially private or a budget is given:
        ``(epsilon, delta)`` of every step's releases composed (the Gaussian
        releases exactly, as one Gaussian mechanism; the deltas of noisy
        selections added), at the budget's delta or else the sum of the
        steps' deltas; ``inf`` when a step released exact statistics.
    privacy_spent_by_step_ : dict
        ``{step name: (epsilon, delta)}`` of each step alone (nested parts
        named ``step__part``).

    See Also
    --------
    make_federated_pipeline : Build one from estimators, names generated.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import FederatedRidge
    >>> from sklearn_fed.pipeline import make_federated_pipeline
    >>> from sklearn_fed.preprocessing import FederatedStandardScaler
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(60, 3)) * 100, rng.normal(size=60)
    >>> pipe = make_federated_pipeline(FederatedStandardScaler(), FederatedRidge())
    >>> pipe.fit(X, y, clients=np.arange(60) % 3).communication_.rounds
    2
    >>> pipe[0].n_clients_, pipe.predict(X[:2]).shape
    (3, (2,))
    """

    _server_role = PipelineServer
    _client_role = PipelineClient
    _parameter_constraints: ClassVar[dict] = {
        **Pipeline._parameter_constraints, "privacy_budget": [None, tuple, PrivacyBudget]}

    def __init__(self, steps, *, transform_input=None, memory=None, verbose=False,
                 privacy_budget=None):
        super().__init__(steps, transform_input=transform_input, memory=memory,
                         verbose=verbose)
        self.privacy_budget = privacy_budget

    @property
    def _exact_federation(self):
        """Exact (any split of the rows gives the pooled model) when every step is."""
        return all(exact_part(step) for _, step in self.steps if not _skipped(step))

    def make_server(self, *, weighted_steps=(), **kwargs):
        """The server role of the pipeline's protocol; it fits this pipeline.

        Parameters
        ----------
        weighted_steps : sequence of str, default=()
            Names of the steps that fit with the sites' sample weights (as
            scikit-learn routes ``sample_weight`` to the steps that ask for it).
        **kwargs
            See :meth:`sklearn_fed.protocol.FederatedMixin.make_server`.

        Returns
        -------
        server : PipelineServer
        """
        return PipelineServer(self, weighted_steps=weighted_steps, **kwargs)

    def _routed(self, params, clients):
        """The sites' weights, the weighted steps and the clients from the routed params."""
        routed = self._check_method_params(method="fit", props=params)
        weights, weighted, found = None, [], []
        for name, step in self.steps:
            if _skipped(step):
                continue
            step_params = {**routed[name].get("fit_transform", {}), **routed[name].get("fit", {})}
            for key, value in step_params.items():
                if key == "sample_weight" and value is not None:
                    if weights is not None and not np.array_equal(weights, value):
                        raise ValueError(
                            "a federated pipeline sends each site one sample_weight column; "
                            f"step {name!r} was given different weights than {weighted[0]!r}."
                        )
                    weights = value
                    weighted.append(name)
                elif key == "clients" and value is not None:
                    found.append((name, value))
                elif key not in ("sample_weight", "clients"):
                    raise TypeError(
                        f"FederatedPipeline passes only sample_weight and clients to its "
                        f"steps; got {key!r} for step {name!r}."
                    )
        for name, value in found:
            if clients is not None and not np.array_equal(np.asarray(clients), np.asarray(value)):
                raise ValueError(f"step {name!r} was given other clients than the pipeline.")
            clients = value
        return weights, weighted, clients

    @fit_method(
        prefer_skip_nested_validation=False,
        X=("array-like or DataFrame of shape (n_samples, n_features)", "The rows."),
        y=("array-like of shape (n_samples,), default=None", "Targets, if any."),
        clients="Site label of each row. ``None``: one site. Also accepted as a step's "
                "parameter (``step__clients``, or routed with ``set_fit_request(clients=True)``).",
        params="``step__sample_weight`` (routing off) or ``sample_weight`` routed to the steps "
               "that request it: each site's weight column, used by those steps.")
    def fit(self, X, y=None, clients=None, **params):
        """Fit every step, one protocol round (or more) per step, on rows split by ``clients``."""
        weights, weighted, clients = self._routed(params, clients)
        return self._fit(X, y, weights, clients, weighted_steps=weighted)

    fit_transform = available_if(Pipeline._can_fit_transform)(
        FederatedCompositeMixin.fit_transform)

    # ------------------------------------------------------------ broadcast
    def _broadcast_state(self):
        arrays, steps = {}, []
        for j, (_, step) in enumerate(self.steps):
            steps.append(None if _skipped(step) else prefixed(
                broadcast_state(step), f"s{j}.", arrays))
        return {"steps": steps}, arrays

    def _load_broadcast_state(self, fields, arrays):
        steps = fields.get("steps") if isinstance(fields, dict) else None
        if set(fields) != {"steps"} or not isinstance(steps, list) or len(steps) != len(
                self.steps):
            server_error("malformed fitted pipeline.")
        self.steps = [
            (name, step if _skipped(step) else load_fitted(
                step, steps[j], take_prefixed(arrays, f"s{j}.")))
            for j, (name, step) in enumerate(self.steps)
        ]
        return self


def make_federated_pipeline(*steps, memory=None, verbose=False, privacy_budget=None):
    """A :class:`FederatedPipeline` from federated estimators, names generated as by make_pipeline.

    Examples
    --------
    >>> from sklearn_fed import FederatedRidge
    >>> from sklearn_fed.preprocessing import FederatedStandardScaler
    >>> make_federated_pipeline(FederatedStandardScaler(), FederatedRidge()).steps[0][0]
    'federatedstandardscaler'
    """
    template = make_pipeline(*steps, memory=memory, verbose=verbose)
    return FederatedPipeline(template.steps, memory=memory, verbose=verbose,
                             privacy_budget=privacy_budget)
