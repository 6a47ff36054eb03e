"""What the federated transformers share: their roles, the fit driver, the broadcast.

A federated transformer is its scikit-learn counterpart whose ``fit`` is
a protocol: every site sends one message (aggregates of its own rows, never
rows), the server merges them and sets exactly the fitted attributes the
counterpart would have on the pooled rows. ``transform``,
``inverse_transform``, ``get_feature_names_out`` and ``set_output`` are
scikit-learn's own, untouched. The fitted attributes are also what a
pipeline's server broadcasts so that sites can transform their rows before
the next step (:meth:`FederatedTransformerMixin._broadcast_state`).
"""

import numpy as np
from sklearn.base import clone

from .._compat import _check_sample_weight
from ..base import FederatedEstimatorMixin, fit_method, set_federation_attributes
from ..protocol import (
    Client,
    FoldedReplies,
    Server,
    decode_state,
    encode_state,
    match_columns,
    sorted_labels,
)
from ..protocol._fields import reply_error, server_error
from ..statistics import merge_statistics

__all__ = ["FederatedTransformerMixin", "OneRoundServer", "TransformerClient"]


class TransformerClient(Client):
    """A site of a transformer's protocol: it checks its rows as the transformer would.

    A DataFrame's columns are matched to the task's features by name, then
    the rows go through the transformer's own validation (so a site refuses
    exactly what scikit-learn's ``fit`` would refuse: text where numbers are
    needed, infinity, a wrong number of columns), on a fresh copy of the
    estimator: validating at a site never changes the site's estimator.
    """

    needs_y = False
    targets_in_reply = False

    def check_rows(self, X, y, sample_weight, schema, site):
        X, names = match_columns(X, schema, site=site)
        try:
            X = clone(self.estimator)._validate_rows(X, reset=True)
            if schema.n_features is not None and X.shape[1] != schema.n_features:
                raise ValueError(
                    f"X has {X.shape[1]} features, but the federation expects "
                    f"{schema.n_features}."
                )
            if sample_weight is not None:
                sample_weight = _check_sample_weight(
                    sample_weight, X, dtype=np.float64, ensure_non_negative=True
                )
        except ValueError as exc:
            raise ValueError(f"site {site!r}: {exc}") from exc
        return X, None, sample_weight, names

    @staticmethod
    def _site_rows(X, sample_weight, rows):
        """This site's rows of a shared ``X`` (all of ``X`` when ``rows`` is None)."""
        if rows is None:
            return X, sample_weight
        X = X.iloc[rows] if hasattr(X, "iloc") else X[rows]
        return X, None if sample_weight is None else sample_weight[rows]


class OneRoundServer(Server):
    """One round in which every site sends one message; subclasses compute the model.

    Replies are merged in the order of their site labels, so any arrival
    order gives the same model, bit for bit. :meth:`apply` commits what the
    subclass's ``_model(replies)`` computes without touching the estimator:
    ``(fitted attributes, n_parameters)``.
    """

    def plan(self, sites):
        if self.round > 0:
            return {}
        fields = self._task_fields()
        return {site: (dict(fields), {}) for site in sites}

    def _task_fields(self):
        """Fields of the one task (what the site must compute); none by default."""
        return {}

    @staticmethod
    def _merged(replies):
        """The merge of the round's replies, in label order (folded already by a server
        with a ``reply_fold``)."""
        if isinstance(replies, FoldedReplies):
            return replies.fold.result()
        return merge_statistics(replies[site] for site in sorted_labels(replies))

    _fail = staticmethod(reply_error)

    def apply(self, replies, ledger):
        estimator = self.estimator
        attributes, n_parameters = self._model(replies)
        # commit: nothing above touched the estimator
        for name, value in attributes.items():
            setattr(estimator, name, value)
        ledger.n_parameters = int(n_parameters)
        set_federation_attributes(estimator, self.schema, ledger, replies, previous_clients=(
            getattr(estimator, "clients_", []) if self.warm_start else []))


class FederatedTransformerMixin(FederatedEstimatorMixin):
    """``fit`` as an in-process run of the roles, the commit, and the broadcast of a model.

    Subclasses define ``_validate_rows(X, reset)`` (their counterpart's input
    validation, also run by each site on its own rows), the roles, and ``_broadcast_attributes``: the fitted
    attributes a site needs to transform rows exactly as the server's model.
    """

    _exact_federation = True
    _broadcast_attributes = ()

    @fit_method(X="The rows, as the scikit-learn counterpart's ``fit`` takes them.")
    def fit(self, X, y=None, clients=None):
        """Fit on rows split among sites by ``clients``: one message per site."""
        return self._fit(X, None, None, clients)

    def _validate_fit_data(self, X, y, sample_weight, *, reset):
        X = self._validate_rows(X, reset=reset)
        if sample_weight is not None:
            sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64)
        return X, None, sample_weight

    # ------------------------------------------------------------ broadcast
    def _broadcast_state(self):
        """``(fields, arrays)``: the fitted model a site needs to transform its rows."""
        return encode_state(self, ("n_features_in_", "feature_names_in_")
                            + tuple(self._broadcast_attributes))

    def _load_broadcast_state(self, fields, arrays):
        """Set the fitted state broadcast by a server (untrusted: types are checked)."""
        names = ("n_features_in_", "feature_names_in_") + tuple(self._broadcast_attributes)
        state = decode_state(fields, arrays, names, server_error)
        if not isinstance(state.get("n_features_in_"), int) or state["n_features_in_"] < 1:
            server_error("the broadcast model has no valid n_features_in_.")
        for name, value in state.items():
            setattr(self, name, value)
        return self
