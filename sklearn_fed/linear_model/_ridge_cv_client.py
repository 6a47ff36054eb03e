"""FederatedRidgeCV's site: its messages and :class:`CVClient`."""

import numpy as np
from sklearn.utils.extmath import safe_sparse_dot

from ..protocol import BlockwiseClient, InvalidClientMessage
from ..statistics import ClientStatistics
from ._base import requested_form, task_field
from ._ridge_cv_algebra import _leave_one_out


# ------------------------------------------------------------- messages
def _pack(named):
    """Several statistics in one message: fields and arrays prefixed by name."""
    fields, arrays = {}, {}
    for name, stats in named.items():
        f, a = stats.to_payload()
        fields.update({f"{name}.{k}": v for k, v in f.items()})
        arrays.update({f"{name}.{k}": v for k, v in a.items()})
    return fields, arrays


def _unpack(fields, arrays, site):
    """The statistics of a reply made by :func:`_pack`, validated, by name."""
    unprefixed = sorted(key for key in list(fields) + list(arrays) if "." not in key)
    if unprefixed:
        raise InvalidClientMessage(
            f"client {site!r}: unexpected entries {unprefixed} (every entry is "
            "'<statistics>.<name>').", site)
    names = {key.split(".", 1)[0] for key in list(fields) + list(arrays)}
    named = {}
    for name in sorted(names):
        part = {k.split(".", 1)[1]: v for k, v in fields.items() if k.split(".", 1)[0] == name}
        data = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.split(".", 1)[0] == name}
        named[name] = ClientStatistics.from_payload(part, data, client=site, psd=False)
    return named


def _checked_array(frame, name, shape, site):
    array = frame.arrays.get(name)
    if not (isinstance(array, np.ndarray) and array.dtype == np.float64 and array.shape == shape
            and np.all(np.isfinite(array))):
        raise InvalidClientMessage(
            f"client {site!r}: {name} must be a finite float64 array of shape {shape}.", site
        )
    return array


class _Block:
    """A :class:`CVClient` answer over one block of a site's rows, before packing.

    ``named`` holds the statistics of a statistics step; otherwise
    ``fields`` (row count and weight, which add) and ``arrays``: those in
    ``_SUMMED`` add over blocks, the others hold one entry per row and
    follow in row order. ``whole``: the task indexed the site's rows, so
    the block must be all of them.
    """

    def __init__(self, fields=None, arrays=None, *, named=None, whole=False):
        self.fields, self.arrays, self.named, self.whole = fields, arrays, named, whole

    def merge(self, other):
        if self.whole or other.whole:
            raise ValueError(
                "the task indexes the site's rows (fold membership or held-out rows), so "
                "they must come in one block; put each site's rows in one partition.")
        if self.named is not None:
            return _Block(named={name: stats.merge(other.named[name])
                                 for name, stats in self.named.items()})
        fields = {name: value + other.fields[name] for name, value in self.fields.items()}
        arrays = {
            name: value + other.arrays[name] if name in _SUMMED
            else np.concatenate([value, other.arrays[name]])
            for name, value in self.arrays.items()
        }
        return _Block(fields, arrays)


#: Arrays of a leave-one-out answer that are sums over rows.
_SUMMED = ("e1", "e2", "sst")


class CVClient(BlockwiseClient):
    """A site of :class:`FederatedRidgeCV`: statistics, leave-one-out sums, predictions.

    Task steps: ``"statistics"`` (the site's statistics, or with a
    ``folds`` array (n_rows, n_folds) of codes 1 = train, 2 = test, also
    those of each fold's training rows and test rows);
    ``"leave_one_out"`` (given the pooled spectrum: per alpha, sums of the
    leave-one-out residuals, and on request every row's value);
    ``"predict"`` (given models: predictions and targets of the rows each
    model holds out).

    Every answer is a reduction over the site's rows (statistics merge,
    sums add, per-row values follow in row order), so the rows may come in
    blocks (Dask partitions), except for tasks whose arrays index the
    site's rows (``folds``, a predict task's ``rows``), which need one block.
    """

    protocol = "ridge.cv"

    def replies_are_independent(self, tasks):
        # Every step reads only the task and the site's rows (no state kept).
        return type(self) is CVClient

    def summarize(self, task, X, y, sample_weight, rows):
        step = task_field(task, "step", str)
        if rows is not None:
            X, y = X[rows], y[rows]
            sample_weight = None if sample_weight is None else sample_weight[rows]
        y = np.asarray(y, dtype=np.float64)
        y2 = y.reshape(y.shape[0], -1)
        if step == "statistics":
            named = self._statistics(task, X, y, sample_weight)
            return _Block(named=named, whole="folds" in task.arrays)
        if step == "leave_one_out":
            return _Block(*self._leave_one_out(task, X, y2, sample_weight))
        if step == "predict":
            fields, arrays = self._predict(task, X, y2, sample_weight)
            whole = any(name.startswith("rows") for name in task.arrays)
            return _Block(fields, arrays, whole=whole)
        raise InvalidClientMessage(f"server: unknown task step {step!r}.", "server")

    def merge(self, first, second):
        return first.merge(second)

    def finish(self, task, summary):
        if summary.named is not None:
            return _pack(summary.named)
        return summary.fields, summary.arrays

    def _statistics(self, task, X, y, sample_weight):
        centered = task_field(task, "centered", bool)
        factor = requested_form(task) == "factor"

        def stats(index=None):
            return ClientStatistics.from_data(
                X, y, sample_weight, centered=centered, rows=index, factor=factor,
                check_input=False,
            )

        named = {"all": stats()}
        folds = task.arrays.get("folds")
        if folds is not None:
            if not (isinstance(folds, np.ndarray) and folds.ndim == 2
                    and folds.shape[0] == X.shape[0] and np.isin(folds, (0, 1, 2)).all()):
                raise InvalidClientMessage("server: malformed fold membership.", "server")
            for j in range(folds.shape[1]):
                for code, part in ((1, "train"), (2, "test")):
                    index = np.flatnonzero(folds[:, j] == code)
                    if index.size:
                        named[f"{part}{j}"] = stats(index)
        return named

    def _leave_one_out(self, task, X, y, sample_weight):
        arrays = task.arrays
        d, t = X.shape[1], y.shape[1]
        alphas = arrays.get("alphas")
        basis = arrays.get("basis")
        if not (isinstance(basis, np.ndarray) and basis.ndim == 2 and basis.shape[0] == d
                and isinstance(alphas, np.ndarray) and alphas.ndim == 1
                and arrays.get("projected") is not None
                and arrays["projected"].shape == (basis.shape[1], t)):
            raise InvalidClientMessage("server: malformed leave-one-out task.", "server")
        predictions = _leave_one_out(task, X, y, sample_weight)
        w = np.ones(X.shape[0]) if sample_weight is None else sample_weight
        residual = y[:, :, None] - predictions
        y_mean = arrays["y_mean"]
        sums = {
            "e1": np.tensordot(w, residual, axes=1),
            "e2": np.tensordot(w, residual**2, axes=1),
            "sst": w @ (y - y_mean) ** 2,
        }
        fields = {"count": int(X.shape[0]), "weight": float(w.sum())}
        kept = task.fields.get("keep_rows")
        if kept == "squared_errors":
            sums["rows"] = w[:, None, None] * residual**2
        elif kept in ("predictions", "scoring"):
            sums["rows"] = predictions
        if kept == "scoring":
            sums["targets"] = y
            sums["weights"] = w
        return fields, sums

    def _predict(self, task, X, y, sample_weight):
        d = X.shape[1]
        fields, arrays = {}, {}
        for name, coef in task.arrays.items():
            if not name.startswith("coef"):
                continue
            key = name[len("coef"):]
            intercept = task.arrays.get(f"intercept{key}")
            if not (coef.ndim == 3 and coef.shape[0] == d and intercept is not None
                    and intercept.shape == coef.shape[1:]):
                raise InvalidClientMessage("server: malformed predict task.", "server")
            index = task.arrays.get(f"rows{key}")
            index = np.arange(X.shape[0]) if index is None else index
            if not (index.ndim == 1 and np.all((0 <= index) & (index < X.shape[0]))):
                raise InvalidClientMessage("server: malformed predict task.", "server")
            flat = safe_sparse_dot(X[index], coef.reshape(d, -1), dense_output=True)
            arrays[f"predictions{key}"] = flat.reshape(index.size, *coef.shape[1:]) + intercept
            arrays[f"targets{key}"] = y[index]
            arrays[f"weights{key}"] = (
                np.ones(index.size) if sample_weight is None else sample_weight[index]
            )
        return fields, arrays
