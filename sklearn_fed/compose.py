"""FederatedColumnTransformer: federated transformers on column subsets, fitted in parallel."""

import functools
import time
from collections import namedtuple

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils import _safe_indexing
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
from .pipeline import PipelineClient
from .protocol import Server, nest, unnest
from .protocol._fields import reply_error, server_error, task_field

__all__ = ["FederatedColumnTransformer"]


def _no_rows(n_features, names):
    """A table with the federation's columns and no rows: what column selections resolve on."""
    if names is None:
        return np.zeros((0, n_features))
    return pd.DataFrame({name: pd.Series([], dtype=object) for name in names})


#: Resolved columns: ``parts`` are ``{index: (name, template, column indices)}`` to fit.
_Layout = namedtuple("_Layout", ["scratch", "parts"])


class ColumnTransformerClient(PipelineClient):
    """A site of a :class:`FederatedColumnTransformer`: each transformer's task on its columns."""

    protocol = "compose.column_transformer"

    def compute(self, task, X, y, sample_weight, rows):
        estimator = self.estimator
        X, y, sample_weight = site_rows(rows, X, y, sample_weight)
        step = task_field(task, "step", str)
        if step == "schema":
            return {"step": "schema"}, {}
        parts = task.fields.get("parts")
        if not isinstance(parts, list) or not parts:
            server_error("malformed column transformer task.")
        # the transformers a site may be asked to run, in the server's part order
        templates = [trans for _, trans, _ in estimator.transformers] + [estimator.remainder]
        fields, arrays, density = {"parts": []}, {}, step == "density"
        nnz = total = 0
        for entry in parts:
            if not (isinstance(entry, dict) and set(entry) == {"part", "columns", "task"}):
                server_error("malformed column transformer task.")
            index, columns = entry["part"], entry["columns"]
            if not (type(index) is int and 0 <= index < len(templates) and isinstance(
                    columns, list) and all(type(c) is int and 0 <= c < X.shape[1]
                                           for c in columns)):
                server_error("malformed column transformer part.")
            Xc = _safe_indexing(X, columns, axis=1)
            prefix = f"p{index}."
            if density:
                template = templates[index]
                output = Xc if isinstance(template, str) else load_fitted(
                    template, entry["task"], take_prefixed(task.arrays, prefix)).transform(Xc)
                nnz += output.nnz if sp.issparse(output) else output.shape[0] * output.shape[1]
                total += output.shape[0] * output.shape[1]
                continue
            meta, part_arrays = answer_part(
                templates[index], entry["task"], task.arrays, prefix, Xc, y, sample_weight,
                site=task.site, policy=self.policy_in_force(),
            )
            fields["parts"].append({"part": index, "reply": meta})
            arrays.update(part_arrays)
        if density:
            return {"step": "density", "nnz": int(nnz), "total": int(total)}, {}
        fields.update(step="fit", sparse_input=bool(sp.issparse(X)))
        return fields, arrays


class ColumnTransformerServer(Server):
    """Server of a :class:`FederatedColumnTransformer`: every transformer's server, in parallel.

    The columns are resolved on the federation's feature names (or count):
    given to ``make_server`` (``feature_names=``, or ``n_features=`` when
    columns are given by position), or else learnt in a first round whose
    replies carry nothing but the sites' feature schema.
    """

    protocol = "compose.column_transformer"
    reports_rounds = False  # it prints its transformers, as ColumnTransformer does

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        self._started = time.perf_counter()
        self.parts = {}
        self._active = {}
        self._sparse_input = False
        self._sparse_output = False  # ColumnTransformer's sparse_output_, once counted
        self._sites = []
        self._stage = "schema" if self.schema.n_features is None else "fit"
        if self._stage == "fit":
            self._make_parts()

    def _make_parts(self):
        estimator = self.estimator
        self.layout = estimator._layout(self.schema.n_features, self.schema.feature_names)
        for index, (name, template, columns) in self.layout.parts.items():
            if isinstance(template, str):  # passthrough: nothing to learn
                continue
            names = None if self.schema.feature_names is None else [
                self.schema.feature_names[c] for c in columns]
            self.parts[index] = make_part_server(
                clone(template), on_invalid=self.on_invalid, max_message_bytes=self.max_message_bytes,
                feature_names=names, n_features=len(columns),
            )

    def plan(self, sites):
        if self._stage == "schema":
            if self.round == 0:
                return {site: ({"step": "schema"}, {}) for site in sites}
            self._make_parts()
            self._stage = "fit"
        if self._stage == "fit":
            frames = {index: part.open_round(sites) for index, part in self.parts.items()}
            self._active = {index: f for index, f in frames.items() if f}
            if self._active:
                return self._wrap(sites)
            # a counting round when the input, or a part's output, may be sparse
            if self.estimator.sparse_threshold and (self._sparse_input or any(
                    getattr(f, "sparse_output", False) is True or getattr(
                        f, "sparse_output_", False) is True for f in self._fitted().values())):
                self._stage = "counting"
                return self._density_tasks(sites)
            self._stage = "done"
        if self._stage == "done":
            self._report()
            self.estimator._commit_layout(self.layout, self._fitted(), self._sparse_output)
            commit_federation(self.estimator, self._ledger, self._fitted().values(), self._sites)
            self._stage = "committed"
        return {}

    def _fitted(self):
        return {index: part.estimator for index, part in self.parts.items()}

    def _report(self):
        """ColumnTransformer's line per transformer (all fitted in the same rounds)."""
        if not self.estimator.verbose:
            return
        elapsed = time.perf_counter() - self._started
        names = [name for name, _, _ in (self.layout.parts[i] for i in sorted(self.layout.parts))]
        for i, name in enumerate(names, start=1):
            print(_message_with_time("ColumnTransformer", f"({i} of {len(names)}) Processing "
                                     f"{name}", elapsed), flush=True)

    def _wrap(self, sites):
        tasks = {}
        for site in sites:
            fields, arrays = {"step": "fit", "parts": []}, {}
            for index, frames in self._active.items():
                if site in frames:
                    fields["parts"].append({
                        "part": index, "columns": list(self.layout.parts[index][2]),
                        "task": nest(frames[site], f"p{index}.", arrays)})
            if fields["parts"]:
                tasks[site] = (fields, arrays)
        return tasks

    def _density_tasks(self, sites):
        arrays, parts = {}, []
        for index, fitted in self._fitted().items():
            parts.append({"part": index, "columns": list(self.layout.parts[index][2]),
                          "task": prefixed(broadcast_state(fitted), f"p{index}.", arrays)})
        for index, (_, template, columns) in self.layout.parts.items():
            if isinstance(template, str):
                parts.append({"part": index, "columns": list(columns), "task": {}})
        return {site: ({"step": "density", "parts": parts}, dict(arrays)) for site in sites}

    def read_reply(self, site, frame):
        fail = functools.partial(reply_error, site)
        fields = frame.fields
        if self._stage == "schema":
            if fields != {"step": "schema"} or frame.arrays:
                fail("malformed schema reply.")
            return None
        if self._stage == "counting":
            nnz, total = fields.get("nnz"), fields.get("total")
            if set(fields) != {"step", "nnz", "total"} or frame.arrays or not (
                    type(nnz) is int and type(total) is int and 0 <= nnz <= total < 2**62):
                fail("malformed density reply.")
            return nnz, total
        parts = fields.get("parts")
        if set(fields) != {"step", "parts", "sparse_input"} or not isinstance(parts, list) or (
                type(fields["sparse_input"]) is not bool):
            fail("malformed column transformer reply.")
        expected = sorted(index for index, frames in self._active.items() if site in frames)
        if not all(isinstance(e, dict) and set(e) == {"part", "reply"} and type(e["part"]) is int
                   for e in parts):
            fail("malformed part reply.")
        got = [entry["part"] for entry in parts]
        if sorted(got) != expected or len(set(got)) != len(got):
            fail(f"replies for parts {got}, expected {expected}.")
        inner = {}
        for entry in parts:
            index = entry["part"]
            inner[index] = unnest(entry["reply"], frame.arrays, f"p{index}.", site=site, fail=fail)
        names = {f"p{index}.{name}" for index, part in inner.items() for name in part.arrays}
        if set(frame.arrays) != names:
            fail("its arrays do not belong to its parts' replies.")
        return inner, fields["sparse_input"]

    def apply(self, replies, ledger):
        self._sites = list(known_labels(self._sites, replies))
        if self._stage == "schema":
            return  # the replies' schema is now the server's (pinned by the round)
        if self._stage == "counting":
            nnz, total = (sum(reply[i] for reply in replies.values()) for i in (0, 1))
            self._sparse_output = bool(total and nnz / total < self.estimator.sparse_threshold)
            self._stage = "done"
            return
        by_part = {index: {site: reply[0][index] for site, reply in replies.items()
                           if index in reply[0]} for index in self._active}
        self.dropped_.update(parse_parts({i: self.parts[i] for i in by_part}, by_part,
                                         self.on_invalid))
        self._sparse_input = self._sparse_input or any(r[1] for r in replies.values())


class FederatedColumnTransformer(FederatedCompositeMixin, ColumnTransformer):
    """A :class:`~sklearn.compose.ColumnTransformer` of federated transformers.

    Each transformer is fitted by its own protocol on its columns of every
    site's rows; all of them run in the same rounds (one message per site
    carries every transformer's reply). ``"passthrough"`` and ``"drop"``
    (also as ``remainder``) need no round. If a transformer may output a
    sparse matrix (e.g. :class:`~sklearn_fed.preprocessing.FederatedOneHotEncoder`
    with ``sparse_output=True``) and ``sparse_threshold > 0``, one more round
    counts the output's non-zeros at the sites, because ColumnTransformer
    decides between a sparse and a dense output from the pooled density.
    ``transform``, ``get_feature_names_out``, ``set_output`` and
    ``output_indices_`` are ColumnTransformer's own.

    Columns are given by name or position (not by callables such as
    ``make_column_selector``: the server resolves them, and it has no rows to
    call them on).

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    transformers, remainder, sparse_threshold, n_jobs, transformer_weights, verbose, \
verbose_feature_names_out, force_int_remainder_cols
        As in :class:`~sklearn.compose.ColumnTransformer` (``n_jobs`` is
        not used).

    Attributes
    ----------
    transformers_, named_transformers_, sparse_output_, output_indices_, n_features_in_, \
feature_names_in_
        As in ColumnTransformer, for the pooled rows.
    communication_ : CommunicationLedger
    clients_ : ndarray of shape (`n_clients_`,)
    n_clients_ : int

    Examples
    --------
    >>> import pandas as pd
    >>> from sklearn_fed.compose import FederatedColumnTransformer
    >>> from sklearn_fed.preprocessing import FederatedOneHotEncoder, FederatedStandardScaler
    >>> X = pd.DataFrame({"size": [1.0, 2.0, 3.0, 4.0], "color": ["r", "g", "r", "b"]})
    >>> ct = FederatedColumnTransformer([
    ...     ("num", FederatedStandardScaler(), ["size"]),
    ...     ("cat", FederatedOneHotEncoder(sparse_output=False), ["color"])])
    >>> ct.fit_transform(X, clients=[0, 0, 1, 1]).shape, ct.communication_.rounds
    ((4, 4), 1)
    """

    _server_role = ColumnTransformerServer
    _client_role = ColumnTransformerClient

    @property
    def _exact_federation(self):
        """Exact (any split of the rows gives the pooled model) when every part is."""
        parts = [trans for _, trans, _ in self.transformers] + [self.remainder]
        return all(exact_part(part) for part in parts if not isinstance(part, str))

    def _layout(self, n_features, names):
        """Resolve every transformer's columns on a table with no rows (names only)."""
        scratch = clone(self)
        empty = _no_rows(n_features, names)
        scratch._validate_transformers()
        for name, trans, columns in scratch.transformers:
            if callable(columns):
                raise ValueError(  # noqa: TRY004 (a value of the right type, unusable here)
                    f"transformer {name!r} selects its columns with a callable; a federated "
                    "server has no rows to call it on: give the column names or positions."
                )
            check_federated(trans, name, transformer=True)
        check_federated(scratch.remainder, "remainder", transformer=True)
        scratch.n_features_in_ = n_features
        if names is not None:
            scratch.feature_names_in_ = np.asarray(names, dtype=object)
        scratch._validate_column_callables(empty)
        scratch._validate_remainder(empty)
        order = {name: i for i, (name, _, _) in enumerate(self.transformers)}
        parts = [None] * (len(self.transformers) + 1)
        for name, trans, columns, _ in scratch._iter(
                fitted=False, column_as_labels=False, skip_drop=True, skip_empty_columns=True):
            index = order.get(name, len(self.transformers))
            parts[index] = (name, trans, scratch._transformer_to_input_indices[name])
        return _Layout(scratch, {i: p for i, p in enumerate(parts) if p is not None})

    def _commit_layout(self, layout, fitted, sparse_output):
        """ColumnTransformer's bookkeeping for fitted parts, done on a copy, then committed."""
        scratch = layout.scratch
        empty = _no_rows(scratch.n_features_in_, getattr(scratch, "feature_names_in_", None))
        parts, outputs = {}, {}
        for index in sorted(layout.parts):
            name, template, columns = layout.parts[index]
            if isinstance(template, str):  # passthrough, fitted as ColumnTransformer fits it
                config = _get_output_config("transform", scratch)["dense"]
                part = FunctionTransformer(
                    accept_sparse=True, check_inverse=False, feature_names_out="one-to-one"
                ).set_output(transform=config).fit(_safe_indexing(empty, columns, axis=1))
            else:
                part = fitted[index]
            parts[name] = part
            outputs[name] = np.zeros((0, len(part.get_feature_names_out())))
        order = [name for name, _, _, _ in scratch._iter(
            fitted=False, column_as_labels=False, skip_drop=True, skip_empty_columns=True)]
        scratch._update_fitted_transformers([parts[name] for name in order])
        scratch.sparse_output_ = sparse_output
        outputs = [outputs[name] for name in order]
        scratch._validate_output(outputs)
        scratch._record_output_indices(outputs)
        params = self.get_params(deep=False)
        for key, value in vars(scratch).items():
            if key not in params:
                setattr(self, key, value)
        return self

    @fit_method(prefer_skip_nested_validation=False,
                X=("array-like or DataFrame of shape (n_samples, n_features)", "The rows."),
                y=("array-like of shape (n_samples,), default=None", "Targets, if any."),
                params="Not supported (a federated transformer's parameters are in its task).")
    def fit(self, X, y=None, clients=None, **params):
        """Fit every transformer on its columns of the sites' rows (in the same rounds)."""
        if params:
            raise TypeError(f"FederatedColumnTransformer.fit takes no {sorted(params)}.")
        return self._fit(X, y, None, clients)

    # ------------------------------------------------------------ broadcast
    def _broadcast_state(self):
        arrays, parts = {}, {}
        layout = self._layout(self.n_features_in_, getattr(self, "feature_names_in_", None))
        fitted = {name: trans for name, trans, _ in self.transformers_}
        for index, (name, template, _) in layout.parts.items():
            if not isinstance(template, str):  # the federated parts
                parts[str(index)] = prefixed(broadcast_state(fitted[name]), f"p{index}.", arrays)
        fields = {"n_features_in_": int(self.n_features_in_), "parts": parts,
                  "sparse_output": bool(self.sparse_output_),
                  "feature_names_in_": None if not hasattr(self, "feature_names_in_") else [
                      str(n) for n in self.feature_names_in_]}
        return fields, arrays

    def _load_broadcast_state(self, fields, arrays):
        if not (isinstance(fields, dict) and set(fields) == {
                "n_features_in_", "parts", "sparse_output", "feature_names_in_"}):
            server_error("malformed fitted column transformer.")
        n, names = fields["n_features_in_"], fields["feature_names_in_"]
        if not (type(n) is int and n > 0) or not (names is None or (
                isinstance(names, list) and len(names) == n
                and all(isinstance(x, str) for x in names))):
            server_error("malformed fitted column transformer schema.")
        layout = self._layout(n, names)
        fitted = {}
        for index, (_, template, _) in layout.parts.items():
            if isinstance(template, str):
                continue
            state = fields["parts"].get(str(index)) if isinstance(fields["parts"], dict) else None
            fitted[index] = load_fitted(template, state, take_prefixed(arrays, f"p{index}."))
        return self._commit_layout(layout, fitted, bool(fields["sparse_output"]))
