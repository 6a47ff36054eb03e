"""The one ``fit`` of every protocol estimator: validate, group rows by client, run the roles.

scikit-learn's ``_BaseRidge.fit`` validates once and hands the arrays to a
solver; here every estimator's ``fit`` and ``partial_fit`` hand their
arguments to :meth:`FederatedEstimatorMixin._fit`, which

1. checks ``clients`` against the raw ``X`` (:func:`take_clients`),
2. validates the rows with the estimator's own :meth:`~FederatedEstimatorMixin._validate_fit_data`
   (its scikit-learn counterpart's validation),
3. groups the rows by client label,
4. makes the server as a deployment would (told the feature names the rows had)
   and one client role, and runs them in process (:func:`~sklearn_fed.protocol.run_simulation`),
   where the server commits the fitted attributes.

An estimator declares its roles (``_server_role``, ``_client_role``) and its
parameters; its public ``fit`` keeps its own docstring and is one line.
"""

import functools
import inspect
import textwrap

import numpy as np
from sklearn.utils.validation import _num_samples

from ._clients import group_rows_by_client, known_labels, take_clients
from ._compat import _fit_context
from .protocol import FederatedMixin, InvalidClientMessage, atomic, run_simulation
from .protocol._schema import nan_advice
from .utils._collections import is_dask_collection

__all__ = ["FederatedEstimatorMixin", "fit_method", "set_federation_attributes"]


def set_federation_attributes(estimator, schema, ledger, clients, *, previous_clients=(),
                              n_features=None):
    """Set the attributes every fitted protocol estimator has, from its server's last round.

    A server's :meth:`~sklearn_fed.protocol.Server.apply` calls it when it
    commits a model: ``communication_`` (the ledger), ``clients_`` and
    ``n_clients_`` (every site so far, in order of first appearance),
    ``n_features_in_`` and ``feature_names_in_`` (from the server's schema,
    never from a reply: ``feature_names_in_`` is removed when the schema has
    no names, as scikit-learn does).

    Parameters
    ----------
    estimator : estimator
        The estimator being fitted.
    schema : FeatureSchema
        The server's schema (:attr:`~sklearn_fed.protocol.Server.schema`).
    ledger : CommunicationLedger
        The round's ledger, as :meth:`~sklearn_fed.protocol.Server.apply` receives it.
    clients : iterable of hashable
        The sites of this fit (e.g. the round's replies, a mapping keyed by site).
    previous_clients : sequence of hashable, default=()
        The sites of earlier calls (``partial_fit``, warm starts), listed first.
    n_features : int, default=None
        ``n_features_in_`` where the schema has none (statistics given
        directly, as in ``fit_statistics``); by default the schema's.

    Examples
    --------
    >>> from sklearn.linear_model import LinearRegression
    >>> from sklearn_fed.protocol import CommunicationLedger, FeatureSchema
    >>> model = LinearRegression()
    >>> set_federation_attributes(model, FeatureSchema(feature_names=["a", "b"]),
    ...                           CommunicationLedger(), {"site-1": None, "site-2": None})
    >>> model.clients_.tolist(), model.n_clients_, model.n_features_in_
    (['site-1', 'site-2'], 2, 2)
    """
    estimator.communication_ = ledger
    estimator.clients_ = known_labels(list(previous_clients), clients)
    estimator.n_clients_ = len(estimator.clients_)
    estimator.n_features_in_ = schema.n_features if n_features is None else n_features
    if schema.feature_names is not None:
        estimator.feature_names_in_ = np.asarray(schema.feature_names, dtype=object)
    else:
        estimator.__dict__.pop("feature_names_in_", None)


def _nan_sites(X, clients):
    """`` The missing values are at site(s) [...].`` for a table whose rows hold NaN."""
    try:
        missing = np.asarray(pd_isna(X)).reshape(_num_samples(X), -1).any(axis=1)
    except (TypeError, ValueError):  # rows whose values cannot be read as missing or not
        return ""
    if not missing.any():
        return ""
    if clients is None:
        return " The missing values are at the only site (no clients were given)."
    labels = np.asarray(clients, dtype=object)[missing]
    sites = sorted({label.item() if isinstance(label, np.generic) else label
                    for label in labels}, key=str)
    return f" The missing values are at site(s) {sites[:10]}{' ...' if len(sites) > 10 else ''}."


def pd_isna(X):
    """Missing entries of an array or a DataFrame (pandas' own test when it is one)."""
    if hasattr(X, "isna"):
        return X.isna()
    if hasattr(X, "tocsr"):  # sparse: only the stored values can be missing
        csr = X.tocsr()
        rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
        out = np.zeros(csr.shape[0], dtype=bool)
        out[rows[np.isnan(csr.data)]] = True
        return out
    array = np.asarray(X)
    return np.isnan(array) if array.dtype.kind in "fc" else np.zeros(array.shape, dtype=bool)


class FederatedEstimatorMixin(FederatedMixin):
    """``fit`` and ``partial_fit`` as in-process runs of the estimator's protocol.

    Subclasses implement :meth:`_validate_fit_data`; the other hooks have
    defaults. Every hook is called in the order listed in the module docstring,
    before anything is fitted, so a hook that raises leaves the estimator as it
    was (``fit`` is also wrapped in :func:`~sklearn_fed.protocol.atomic`).
    """

    def _fit(self, X, y=None, sample_weight=None, clients=None, *, partial=False,
             **server_kwargs):
        """The body of ``fit`` (``partial=False``) and ``partial_fit`` (``partial=True``).

        ``partial_fit`` continues the fitted model when :meth:`_fitted_state`
        says there is one (the server is then warm-started), else it fits anew.
        ``server_kwargs`` go to :meth:`make_server` (say ``partial_fit``'s
        ``classes``, or ``max_rounds``).
        """
        collection = any(map(is_dask_collection, (X, y, sample_weight, clients)))
        if collection:
            # The optional extra, imported only when a Dask collection comes in.
            from .dask._fit import collection_rows

            X = collection_rows(self, X, y, sample_weight, clients, partial=partial)
            if X is None:  # streamed: one round per partition
                return self
        warm = partial and self._fitted_state() is not None
        self._check_before_rows(partial=partial)
        clients = take_clients(self, X, clients)
        raw = X
        try:
            if collection:  # checked where each partition is read (unread here: no NaN sites)
                y, sample_weight, labels, rows = X.validate(self, reset=not warm)
            else:
                X, y, sample_weight = self._validate_fit_data(X, y, sample_weight,
                                                              reset=not warm)
                labels, rows = self._client_rows(clients, X, y, reset=not warm)
            if warm:
                self._check_more_rows(X, y)
            self._run_sites(X, y, sample_weight, labels, rows, warm_start=warm,
                            clients=clients, **server_kwargs)
        except ValueError as exc:
            # a direct fit names the sites that hold missing values, and what to do
            sites = "" if "NaN" not in str(exc) or "FederatedSimpleImputer" in str(
                exc) else _nan_sites(raw, clients)
            if not sites:
                raise
            text = f"{exc}{sites}{nan_advice(exc)}"
            if isinstance(exc, InvalidClientMessage):
                raise InvalidClientMessage(text, exc.client) from exc
            raise ValueError(text) from exc
        return self

    #: How ``fit`` takes Dask collections (:mod:`sklearn_fed.dask`): ``"partitions"``
    #: (each round's replies computed partition by partition where the rows are
    #: stored, merged by the client role's ``merge``), ``"stream"`` (one
    #: ``partial_fit`` per partition) or None (refused: e.g. site roles that keep
    #: state between calls, which copies sent to workers would not carry back).
    _dask_rows = None

    # ------------------------------------------------------------ hooks
    def _check_collection(self):
        """Refuse parameters that Dask collections cannot serve; none by default."""

    def _check_before_rows(self, *, partial):
        """Parameter checks the counterpart makes before it reads a row; none by default."""

    def _validate_fit_data(self, X, y, sample_weight, *, reset):
        """``(X, y, sample_weight)`` validated as the scikit-learn counterpart's ``fit`` would.

        ``reset`` is True unless ``partial_fit`` continues a fitted model (then
        ``n_features_in_`` and ``feature_names_in_`` are checked, not set).
        """
        raise NotImplementedError(
            f"{type(self).__name__} must define _validate_fit_data: the input validation of "
            "its scikit-learn counterpart's fit (a required hook of the fit template)."
        )

    def _client_rows(self, clients, X, y, *, reset):
        """``(labels, rows)``: each client's rows of the validated ``X``; by ``clients`` by default.

        An estimator that simulates clients when ``clients`` is None (say by
        splitting the rows with a ``partition`` parameter) overrides it.
        """
        return group_rows_by_client(clients, _num_samples(X))

    def _fitted_state(self):
        """What ``partial_fit`` continues from (None: nothing yet); ``n_features_in_`` here."""
        return getattr(self, "n_features_in_", None)

    def _check_more_rows(self, X, y):
        """``partial_fit``: refuse rows that cannot continue the fitted model; none by default."""

    def _run_sites(self, X, y, sample_weight, labels, rows, *, warm_start=False, clients=None,
                   **server_kwargs):
        """Make the server (told the fitted feature names) and a client role; run them.

        ``clients`` is the per-row labels as given (None: not given), for
        estimators whose run depends on them beyond the grouping (a splitter's
        groups). Returns ``(server, client)``.
        """
        names = self._server_feature_names(X)
        server = self.make_server(feature_names=names, warm_start=warm_start, **server_kwargs)
        client = self._simulated_client(warm_start=warm_start)
        self._simulate(server, client, X, y, sample_weight, labels, rows, names)
        return server, client

    def _simulated_client(self, *, warm_start):
        """The client role that answers for every simulated site (:meth:`make_client` here)."""
        return self.make_client()

    def _simulate(self, server, client, X, y, sample_weight, labels, rows, names):
        """:func:`~sklearn_fed.protocol.run_simulation` of the two roles (a family may wrap it)."""
        run_simulation(server, client, X, y, sample_weight, labels, rows, names)

    def _server_feature_names(self, X):
        """The feature names the server is told: those ``fit`` just validated, by default.

        A composite (pipeline, column transformer) validates no columns itself:
        it reads them from the table ``X`` as its sites will see it.
        """
        names = getattr(self, "feature_names_in_", None)
        return None if names is None else [str(name) for name in names]


#: The parameters of a ``fit`` as :func:`fit_method` documents them: ``(type, description)``.
_FIT_PARAMETERS = {
    "X": ("{array-like, sparse matrix} of shape (n_samples, n_features)", "Training rows."),
    "y": ("array-like of shape (n_samples,) or (n_samples, n_targets)", "Targets."),
    "sample_weight": ("array-like of shape (n_samples,), default=None",
                      "Non-negative row weights."),
    "clients": ("array-like of shape (n_samples,), default=None",
                "Client label of each row (any hashable). ``None``: one client."),
}


def fit_method(method=None, *, partial=False, prefer_skip_nested_validation=True,
               **descriptions):
    """Make ``method``, whose body calls :meth:`FederatedEstimatorMixin._fit`, a public ``fit``.

    It adds what every ``fit`` shares: scikit-learn's parameter validation
    (``_fit_context``), :func:`~sklearn_fed.protocol.atomic`, and the
    Parameters (read from the signature) and Returns sections of the
    docstring, appended to the method's own summary.

    Parameters
    ----------
    method : callable, default=None
        The method; None returns the decorator with the other arguments bound.
    partial : bool or str, default=False
        Document a ``partial_fit``: the parameters not in ``descriptions`` are
        listed together as "As in :meth:`fit`." (or as this text).
    prefer_skip_nested_validation : bool, default=True
        As in ``_fit_context``: False for a ``fit`` that fits estimators given
        as parameters (a pipeline's steps).
    **descriptions : str or tuple of (str, str)
        By parameter name, its description or ``(type, description)``. ``X``,
        ``y``, ``sample_weight`` and ``clients`` have defaults (``y=None`` in
        the signature: ignored); any other parameter must be described.

    Returns
    -------
    method : callable
        The decorated method.

    Examples
    --------
    >>> from sklearn_fed import FederatedEmpiricalCovariance
    >>> print(*FederatedEmpiricalCovariance.fit.__doc__.splitlines()[2:7], sep="\\n")
    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        The rows, as EmpiricalCovariance's ``fit`` takes them.
    y : None
    """
    if method is None:
        return functools.partial(fit_method, partial=partial, **descriptions,
                                 prefer_skip_nested_validation=prefer_skip_nested_validation)
    shared, entries = [], []
    for parameter in list(inspect.signature(method).parameters.values())[1:]:
        name, described = parameter.name, descriptions.get(parameter.name)
        if parameter.kind is parameter.VAR_KEYWORD:
            name = f"**{name}"
        if partial and described is None:
            shared.append(name)
            continue
        kind, text = ("None", "Ignored.") if name == "y" and parameter.default is None else (
            _FIT_PARAMETERS.get(name, (None, None)))
        kind, text = described if isinstance(described, tuple) else (kind, described or text)
        if text is None:
            raise TypeError(f"fit_method: describe {name!r} of {method.__qualname__}.")
        entries.append((name if kind is None else f"{name} : {kind}", text))
    if shared:
        entries.insert(0, (", ".join(shared), partial if isinstance(partial, str) else (
            "As in :meth:`fit`.")))
    lines = [inspect.cleandoc(method.__doc__), "", "Parameters", "----------"]
    for entry, text in entries:
        lines += [entry, textwrap.fill(text, 79, initial_indent="    ",
                                       subsequent_indent="    ")]
    lines += ["", "Returns", "-------", "self : object", "    The fitted estimator."]
    method.__doc__ = "\n".join(lines)
    context = _fit_context(prefer_skip_nested_validation=prefer_skip_nested_validation)
    return context(atomic(method))
