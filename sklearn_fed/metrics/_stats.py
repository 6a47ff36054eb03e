"""The sums a site sends for each metric, their merge, and the metrics computed from them.

Every metric here is a function of a few per-site sums, merged exactly at the
server:

- **regression** (``"reg"``): the weight sum, the weighted mean and centered
  sum of squares of ``y`` (merged as Chan, Golub & LeVeque do, so R²'s
  denominator loses no digits), and the weighted sums of squared and absolute
  errors, per output;
- **labels** (``"cm"``): the confusion matrix over the model's classes, as
  row counts and as weight sums; every label-based metric (accuracy,
  precision, recall, F1, balanced accuracy, the confusion matrix) is
  scikit-learn's own function applied to the merged matrix written as a
  table of ``(true, predicted, weight)`` cells, so counts give scikit-learn's
  result bit for bit;
- **probabilities** (``"proba"``): the weighted sums of the log-loss and of
  the Brier loss of the site's rows;
- **ranking** (``"rank"``): for binary targets, the site's distinct scores
  with the weight and count of positive and negative rows at each; ROC AUC
  and average precision are scikit-learn's functions applied to the merged
  ``(score, label, weight)`` table: exact for counts, since they read the
  rows only through cumulative sums at each distinct score.

What each reveals to the server is listed in :doc:`/user_guide/evaluation`.
"""

import numbers

import numpy as np
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    balanced_accuracy_score,
    log_loss,
    precision_recall_fscore_support,
    roc_auc_score,
)

__all__ = ["METRICS", "merge_stats", "metric_kinds", "scores_from", "site_stats"]

# name -> (statistics it needs, needs class labels, greater is better)
METRICS = {
    "r2": ("reg", False, True),
    "mean_squared_error": ("reg", False, False),
    "root_mean_squared_error": ("reg", False, False),
    "mean_absolute_error": ("reg", False, False),
    "accuracy": ("cm", True, True),
    "balanced_accuracy": ("cm", True, True),
    "confusion_matrix": ("cm", True, None),
    "precision": ("cm", True, True),
    "recall": ("cm", True, True),
    "f1": ("cm", True, True),
    "log_loss": ("proba", True, False),
    "brier_score": ("proba", True, False),
    "roc_auc": ("rank", True, True),
    "average_precision": ("rank", True, True),
}
_AVERAGES = ("binary", "micro", "macro", "weighted", "samples")


def parse_metric(name):
    """``(base metric, average or None, sign)`` of a metric or scorer name.

    Scorer names as scikit-learn spells them are accepted: ``"neg_"`` in front
    of a loss gives its negative, ``"f1_macro"`` is F1 with ``average="macro"``.

    Examples
    --------
    >>> parse_metric("neg_log_loss"), parse_metric("f1_macro")
    (('log_loss', None, -1), ('f1', 'macro', 1))
    """
    if not isinstance(name, str):
        raise TypeError(f"a metric is named by a string; got {name!r}.")
    sign, base = 1, name
    if base.startswith("neg_"):
        sign, base = -1, base[len("neg_"):]
    average = None
    for option in _AVERAGES:
        if base.endswith("_" + option) and base[: -len(option) - 1] in (
                "precision", "recall", "f1"):
            base, average = base[: -len(option) - 1], option
    if base == "brier_score_loss":
        base = "brier_score"
    if base not in METRICS or (sign < 0 and METRICS[base][2] is not False):
        known = sorted(METRICS) + [f"neg_{m}" for m, v in METRICS.items() if v[2] is False]
        raise ValueError(f"unknown metric {name!r}; known: {known}.")
    return base, average, sign


def metric_kinds(metrics):
    """The statistics kinds the metrics need, in a fixed order."""
    kinds = {METRICS[parse_metric(m)[0]][0] for m in metrics}
    return [kind for kind in ("reg", "cm", "proba", "rank") if kind in kinds]


# ------------------------------------------------------------------ at a site
def _rank_scores(model, X, pos_index):
    """The score of the positive class: decision_function first, as scikit-learn's scorers."""
    if hasattr(model, "decision_function"):
        scores = np.asarray(model.decision_function(X), dtype=np.float64)
        if scores.ndim != 1:
            raise ValueError("roc_auc and average_precision across sites need binary targets.")
        return scores if pos_index == 1 else -scores
    proba = np.asarray(model.predict_proba(X), dtype=np.float64)
    if proba.shape[1] != 2:
        raise ValueError("roc_auc and average_precision across sites need binary targets.")
    return proba[:, pos_index]


def site_stats(model, X, y, sample_weight, spec):
    """``(fields, arrays)``: the sums of one site's rows that ``spec`` asks for.

    ``spec`` holds ``kinds``, ``classes`` (the model's, for label metrics),
    ``pos_index`` and ``score_decimals``.
    """
    n = len(y)
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    fields = {"n_rows": int(n), "weighted": sample_weight is not None}
    arrays = {"weight_sum": np.array([w.sum()])}
    classes = spec.get("classes")
    kinds = spec["kinds"]
    codes = None
    if classes is not None:
        codes = np.searchsorted(classes, y) if len(classes) else np.zeros(n, dtype=np.intp)
        codes = np.minimum(codes, len(classes) - 1)
        unknown = classes[codes] != y
        if unknown.any():
            raise ValueError(
                f"y holds labels the model does not know: {sorted(set(y[unknown].tolist()))[:5]}"
                f"; its classes are {classes.tolist()}.")
    if {"reg", "cm"} & set(kinds):
        predicted = model.predict(X)
    if "reg" in kinds:
        yy = np.asarray(y, dtype=np.float64).reshape(n, -1)
        yp = np.asarray(predicted, dtype=np.float64).reshape(n, -1)
        if yp.shape != yy.shape:
            raise ValueError(f"the model predicts {yp.shape[1]} outputs, y has {yy.shape[1]}.")
        total = w.sum()
        mean = (w @ yy) / total if total > 0 else np.zeros(yy.shape[1])
        errors = yy - yp
        arrays.update(
            y_mean=mean, y_m2=w @ (yy - mean) ** 2,
            sse=w @ errors ** 2, sae=w @ np.abs(errors))
    if "cm" in kinds:
        k = len(classes)
        pred_codes = np.searchsorted(classes, predicted)
        pred_codes = np.minimum(pred_codes, k - 1)
        if (classes[pred_codes] != predicted).any():
            raise ValueError("the model predicts labels outside its classes_.")
        cell = codes * k + pred_codes
        arrays["cm_counts"] = np.bincount(cell, minlength=k * k).reshape(k, k).astype(np.int64)
        arrays["cm_weights"] = np.bincount(cell, weights=w, minlength=k * k).reshape(k, k)
    if "proba" in kinds:
        proba = np.asarray(model.predict_proba(X), dtype=np.float64)
        # scikit-learn's own per-row log-loss (its clipping and checks), summed
        arrays["log_loss_sum"] = np.array([log_loss(
            y, proba, normalize=False, sample_weight=w, labels=classes)])
        onehot = np.zeros_like(proba)
        onehot[np.arange(n), codes] = 1.0
        if len(classes) == 2:
            pos = spec["pos_index"]
            brier = (onehot[:, pos] - proba[:, pos]) ** 2
        else:
            brier = ((onehot - proba) ** 2).sum(axis=1)
        arrays["brier_sum"] = np.array([w @ brier])
    if "rank" in kinds:
        if len(classes) != 2:
            raise ValueError("roc_auc and average_precision across sites need binary targets.")
        scores = _rank_scores(model, X, spec["pos_index"])
        decimals = spec.get("score_decimals")
        if decimals is not None:
            scores = np.round(scores, decimals)
        if not np.isfinite(scores).all():
            raise ValueError("the model gives non-finite scores.")
        values, inverse = np.unique(scores, return_inverse=True)
        positive = codes == spec["pos_index"]
        m = len(values)
        arrays.update(
            scores=values,
            pos_weights=np.bincount(inverse, weights=w * positive, minlength=m),
            neg_weights=np.bincount(inverse, weights=w * ~positive, minlength=m),
            pos_counts=np.bincount(inverse[positive], minlength=m).astype(np.int64),
            neg_counts=np.bincount(inverse[~positive], minlength=m).astype(np.int64),
        )
    return fields, arrays


# ------------------------------------------------------------------ at the server
class SiteStats:
    """One site's (or a merge's) sums, checked; :meth:`merge` is exact for counts."""

    def __init__(self, n_rows, weighted, arrays):
        self.n_rows, self.weighted, self.arrays = n_rows, weighted, arrays

    @classmethod
    def read(cls, fields, arrays, spec, fail):
        """Check a reply's sums against the task (``spec``); ``fail(reason)`` raises."""
        if set(fields) != {"n_rows", "weighted"}:
            fail("the reply's fields are not n_rows and weighted.")
        n_rows, weighted = fields["n_rows"], fields["weighted"]
        if not (type(n_rows) is int and 1 <= n_rows < 2**53) or type(weighted) is not bool:
            fail("n_rows must be a positive int and weighted a bool.")
        kinds, k = spec["kinds"], len(spec["classes"]) if spec.get("classes") is not None else 0
        expected = {"weight_sum": (1,)}
        if "reg" in kinds:
            t = spec["n_outputs"]
            expected.update(y_mean=(t,), y_m2=(t,), sse=(t,), sae=(t,))
        if "cm" in kinds:
            expected.update(cm_counts=(k, k), cm_weights=(k, k))
        if "proba" in kinds:
            expected.update(log_loss_sum=(1,), brier_sum=(1,))
        rank = ("scores", "pos_weights", "neg_weights", "pos_counts", "neg_counts")
        if set(arrays) != set(expected) | (set(rank) if "rank" in kinds else set()):
            fail(f"the reply's arrays are {sorted(arrays)}, not those the task asked for.")
        checked = {}
        for name, value in arrays.items():
            if not (isinstance(value, np.ndarray) and value.dtype.kind in "fiu"):
                fail(f"array {name!r} is not numeric.")
            if name in expected and value.shape != expected[name]:
                fail(f"array {name!r} has shape {value.shape}, expected {expected[name]}.")
            if name in rank and (value.ndim != 1 or len(value) > n_rows):
                fail(f"array {name!r} must be a vector of at most n_rows values.")
            if name.endswith("counts") and value.dtype.kind not in "iu":
                fail(f"array {name!r} must hold integers.")
            value = np.array(value, dtype=np.int64 if name.endswith("counts") else np.float64)
            if not np.isfinite(value).all() or (name not in ("y_mean", "scores") and (
                    value < 0).any()):
                fail(f"array {name!r} holds negative or non-finite values.")
            checked[name] = value
        if "rank" in kinds:
            m = len(checked["scores"])
            if any(len(checked[name]) != m for name in rank) or m == 0 or (
                    np.diff(checked["scores"]) <= 0).any():
                fail("the score table must list increasing distinct scores with one count each.")
            counts = checked["pos_counts"] + checked["neg_counts"]
            if (counts == 0).any() or counts.sum() != n_rows:
                fail("the score table's counts must be positive and sum to n_rows.")
        if "cm" in kinds and checked["cm_counts"].sum() != n_rows:
            fail("the confusion matrix's counts do not sum to n_rows.")
        return cls(n_rows, weighted, checked)

    def merge(self, other):
        a, b = self.arrays, other.arrays
        merged = {"weight_sum": a["weight_sum"] + b["weight_sum"]}
        if "y_mean" in a:
            wa, wb = a["weight_sum"][0], b["weight_sum"][0]
            total = wa + wb
            delta = b["y_mean"] - a["y_mean"]
            share = wb / total if total > 0 else 0.0
            merged["y_mean"] = a["y_mean"] + delta * share
            merged["y_m2"] = a["y_m2"] + b["y_m2"] + (
                delta ** 2 * (wa * share) if total > 0 else 0.0)
            for name in ("sse", "sae"):
                merged[name] = a[name] + b[name]
        for name in ("cm_counts", "cm_weights", "log_loss_sum", "brier_sum"):
            if name in a:
                merged[name] = a[name] + b[name]
        if "scores" in a:
            values, inverse = np.unique(np.concatenate([a["scores"], b["scores"]]),
                                        return_inverse=True)
            for name in ("pos_weights", "neg_weights", "pos_counts", "neg_counts"):
                merged[name] = np.bincount(inverse, weights=np.concatenate([a[name], b[name]]),
                                           minlength=len(values))
                if name.endswith("counts"):
                    merged[name] = np.rint(merged[name]).astype(np.int64)
            merged["scores"] = values
        return SiteStats(self.n_rows + other.n_rows, self.weighted or other.weighted, merged)


def merge_stats(stats):
    """The merge of a list of :class:`SiteStats` in the given order (a balanced tree)."""
    stats = list(stats)
    while len(stats) > 1:
        stats = [stats[i].merge(stats[i + 1]) if i + 1 < len(stats) else stats[i]
                 for i in range(0, len(stats), 2)]
    return stats[0]


def _label_table(stats, classes):
    """The merged confusion matrix as ``(y_true, y_pred, weight)`` cells, one per non-empty cell."""
    counts = stats.arrays["cm_counts"]
    true, pred = np.nonzero(counts)
    weights = stats.arrays["cm_weights"][true, pred] if stats.weighted else counts[true, pred]
    return classes[true], classes[pred], weights


def _rank_table(stats):
    a = stats.arrays
    pos, neg = a["pos_counts"] > 0, a["neg_counts"] > 0
    weights = ("pos_weights", "neg_weights") if stats.weighted else ("pos_counts", "neg_counts")
    scores = np.concatenate([a["scores"][pos], a["scores"][neg]])
    labels = np.concatenate([np.ones(pos.sum(), dtype=int), np.zeros(neg.sum(), dtype=int)])
    w = np.concatenate([a[weights[0]][pos], a[weights[1]][neg]]).astype(np.float64)
    return labels, scores, w


def _regression(stats, base, multioutput):
    a = stats.arrays
    total = a["weight_sum"][0]
    if base == "r2":
        numerator, denominator = a["sse"], a["y_m2"]
        values = np.ones_like(numerator)
        valid = (numerator != 0) & (denominator != 0)
        values[valid] = 1 - numerator[valid] / denominator[valid]
        values[(numerator != 0) & (denominator == 0)] = 0.0
    elif base == "mean_absolute_error":
        values = a["sae"] / total
    else:
        values = a["sse"] / total
        if base == "root_mean_squared_error":
            values = np.sqrt(values)
    if multioutput == "raw_values":
        return values
    return float(np.average(values))


def scores_from(stats, metrics, spec, params):
    """``{name: value}`` of every metric in ``metrics`` from merged ``stats``.

    ``params`` holds ``average``, ``multioutput``, ``zero_division`` and ``beta``.
    """
    classes, out = spec.get("classes"), {}
    for name in metrics:
        base, average, sign = parse_metric(name)
        average = average or params["average"]
        kind = METRICS[base][0]
        if kind == "reg":
            value = _regression(stats, base, params["multioutput"])
        elif kind == "cm":
            # counts as weights give scikit-learn's unweighted result exactly (integer sums)
            y_true, y_pred, sample_weight = _label_table(stats, classes)
            if base == "accuracy":
                value = accuracy_score(y_true, y_pred, sample_weight=sample_weight)
            elif base == "balanced_accuracy":
                value = balanced_accuracy_score(y_true, y_pred, sample_weight=sample_weight)
            elif base == "confusion_matrix":
                present = (stats.arrays["cm_counts"].sum(axis=0)
                           + stats.arrays["cm_counts"].sum(axis=1)) > 0
                matrix = stats.arrays["cm_weights" if stats.weighted else "cm_counts"]
                value = matrix[np.ix_(present, present)]
            else:
                pos_label = classes[spec["pos_index"]]
                if isinstance(pos_label, np.generic):
                    pos_label = pos_label.item()
                # scikit-learn reads pos_label only for average="binary" (and warns otherwise)
                p, r, f, _ = precision_recall_fscore_support(
                    y_true, y_pred, sample_weight=sample_weight, average=average,
                    zero_division=params["zero_division"],
                    beta=params["beta"] if base == "f1" else 1.0,
                    **({"pos_label": pos_label} if average == "binary" else {}))
                value = {"precision": p, "recall": r, "f1": f}[base]
        elif kind == "proba":
            key = "log_loss_sum" if base == "log_loss" else "brier_sum"
            value = stats.arrays[key][0] / stats.arrays["weight_sum"][0]
        else:
            labels, scores, w = _rank_table(stats)
            function = roc_auc_score if base == "roc_auc" else average_precision_score
            value = function(labels, scores, sample_weight=w)
        if isinstance(value, numbers.Real) or (isinstance(value, np.ndarray) and value.ndim == 0):
            value = float(value)
        out[name] = sign * value if sign < 0 else value
    return out
