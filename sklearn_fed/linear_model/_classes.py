"""The first round of every federated classifier: the sites agree on the classes.

A classifier cannot encode its labels before it knows all classes, and a
site knows only its own. So every classifier protocol starts with a
``"classes"`` round: each site sends its set of labels (and, only for
``class_weight="balanced"``, how many rows each has); the server takes the
sorted union (scikit-learn's ``classes_``) and the class weights, and every
later task carries them, so each site encodes its labels identically.
"""

import numpy as np
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from .._compat import (
    _check_unknown,
    _encode,
    _unique,
    validate_data,
)
from ..protocol import (
    Client,
    CountedLabels,
    InvalidClientMessage,
    decode_values,
    encode_values,
    sorted_labels,
)
from ..protocol._errors import failing
from ..protocol._fields import server_error
from ._base import rows_and_weights, task_field

__all__ = ["ClassesClient", "ClassesServerMixin", "class_weights", "validate_classification"]


def validate_classification(estimator, X, y, sample_weight, *, reset=True, multi_output=False,
                            check_targets=check_classification_targets):
    """``(X, y, sample_weight)`` of a classifier's ``fit``, as scikit-learn's linear classifiers check them."""
    X, y = validate_data(
        estimator, X, y, accept_sparse=["csr", "csc", "coo"], dtype=[np.float64, np.float32],
        multi_output=multi_output, y_numeric=False, reset=reset,
    )
    check_targets(y)
    X, sample_weight = rows_and_weights(X, sample_weight)
    return X, y, sample_weight


def class_weights(class_weight, classes, counts):
    """One weight per class, as ``compute_class_weight`` gives on the pooled labels.

    ``counts`` (rows, or sample weights, per class, summed over sites) is
    needed only for ``"balanced"``: ``sum(counts) / (n_classes * counts)``.

    Examples
    --------
    >>> class_weights("balanced", np.array(["a", "b"]), np.array([3, 1]))
    array([0.66666667, 2.        ])
    """
    if class_weight is None:
        return np.ones(len(classes))
    if isinstance(class_weight, str) and class_weight == "balanced":
        return counts.sum() / (len(classes) * counts.astype(np.float64))
    return compute_class_weight(class_weight, classes=classes, y=classes)


class ClassesClient(Client):
    """A site of a classifier's protocol: answers the classes round, then encodes its labels.

    Subclasses implement ``_compute_encoded(task, X, index, weight, classes)``
    for the later rounds: ``X`` and ``index`` (each row's class position)
    are this site's rows, ``weight`` each row's sample weight times its class
    weight.
    """

    y_numeric = False
    #: The classes round names the site's labels; the policy refuses a rare one.
    disclosure = (CountedLabels("class_rows"),)

    def check_rows(self, X, y, sample_weight, schema, site):
        X, y, sample_weight, names = super().check_rows(X, y, sample_weight, schema, site)
        try:
            y = column_or_1d(y, warn=True)
            check_classification_targets(y)
        except ValueError as exc:
            raise ValueError(f"site {site!r}: {exc}") from exc
        return X, y, sample_weight, names

    def compute(self, task, X, y, sample_weight, rows):
        step = task_field(task, "step", str)
        if rows is not None:
            X, y = X[rows], y[rows]
            sample_weight = None if sample_weight is None else sample_weight[rows]
        if step == "classes":
            classes, counts = _unique(y, return_counts=True)
            arrays = {}
            fields = {"step": "classes", "n_samples": int(y.shape[0]),
                      "classes": encode_values(classes, "classes", arrays)}
            arrays["class_rows"] = np.asarray(counts, dtype=np.int64)  # the policy's, not sent
            how = task_field(task, "counts", str)
            if how == "rows":
                arrays["class_counts"] = np.asarray(counts, dtype=np.int64)
            elif how == "weights":  # balanced by sample weight, as LogisticRegression
                index = _encode(y, uniques=classes, check_unknown=False)
                weight = np.ones(y.shape[0]) if sample_weight is None else sample_weight
                arrays["class_counts"] = np.bincount(index, weight, minlength=classes.shape[0])
            elif how != "none":
                server_error(f"unknown counts request {how!r}.")
            extra_fields, extra_arrays = self._classes_extra(task, X, y, sample_weight)
            fields.update(extra_fields)
            arrays.update(extra_arrays)
            return fields, arrays
        return self._compute_encoded(task, X, *self._encode_labels(task, y, sample_weight))

    def released_parameters(self, task, frame):
        """The model the later rounds fit, for the parameters-per-row rule: ``n_features + 1``
        per output, one output for two classes and one per class for more. The classes
        round fits nothing (its labels are screened by :attr:`disclosure`)."""
        if task.fields.get("step") == "classes":
            return None
        default = super().released_parameters(task, frame)
        if "classes" not in task.fields:  # multilabel rounds: one output per target
            return default
        n_classes = len(decode_values(task.fields["classes"], task.arrays, server_error))
        outputs = 1 if n_classes <= 2 else n_classes
        return max(default, (int(frame.schema["n_features"]) + 1) * outputs)

    def _encode_labels(self, task, y, sample_weight):
        """``(index, weight, classes)`` of a site's labels ``y`` under the task's classes."""
        classes = decode_values(task.fields.get("classes"), task.arrays, server_error)
        weights = task.arrays.get("class_weight")
        if not (isinstance(weights, np.ndarray) and weights.dtype == np.float64
                and weights.shape == classes.shape and np.all(np.isfinite(weights))
                and np.all(weights >= 0)):
            server_error("class_weight must be one finite non-negative float per class.")
        if y.dtype.kind in "biuf" and classes.dtype.kind in "biuf" and classes.size:
            # Numbers: each label's position by bisection, checked by looking it up
            # (one pass; _check_unknown would sort the labels again every round).
            index = np.searchsorted(classes, y)
            known = classes[np.minimum(index, classes.shape[0] - 1)] == y
            unknown = () if known.all() else np.unique(y[~known])
        else:
            unknown = _check_unknown(y, classes)
            index = None if len(unknown) else _encode(y, uniques=classes, check_unknown=False)
        if len(unknown):
            raise ValueError(
                f"site {task.site!r}: labels {np.asarray(unknown).tolist()} are not among the "
                "federation's classes (they changed since the classes round)."
            )
        weight = weights[index] if sample_weight is None else weights[index] * sample_weight
        return index, weight, classes

    def _classes_extra(self, task, X, y, sample_weight):
        """Hook: what more the classes round asks of a site, as ``(fields, arrays)``."""
        return {}, {}


class ClassesServerMixin:
    """Server side of the classes round (mixed in before a :class:`~sklearn_fed.protocol.Server`).

    Until the classes are known, ``plan`` asks for them and ``apply``
    merges them; afterwards ``classes_`` and ``class_weight_`` (one weight
    per class) are set on the server and the subclass's hooks
    ``_plan_classified``, ``_read_classified`` and ``_apply_classified`` run.
    """

    classes_ = None
    #: ``"balanced"`` counts rows per class ("rows") or sums sample weights ("weights").
    _balance_by = "rows"

    def plan(self, sites):
        if self.classes_ is None:
            counts = self._balance_by if isinstance(self.estimator.class_weight, str) else "none"
            fields, arrays = self._classes_task_extra()
            fields.update(step="classes", counts=counts)
            return {site: (dict(fields), dict(arrays)) for site in sites}
        return self._plan_classified(sites)

    def _classes_task_extra(self):
        """Hook: more fields and arrays for the classes task; none by default."""
        return {}, {}

    def _classes_extra_keys(self):
        """Hook: the fields and arrays a classes reply carries besides the classes."""
        return frozenset(), frozenset()

    def _classes_task(self):
        """Fields and arrays every later task carries: the classes and their weights."""
        arrays = {"class_weight": self.class_weight_}
        return {"classes": encode_values(self.classes_, "classes", arrays)}, arrays

    def read_reply(self, site, frame):
        if self.classes_ is not None:
            return self._read_classified(site, frame)

        fail = failing(site)
        fields = frame.fields
        n = fields.get("n_samples")
        extra_fields, extra_arrays = self._classes_extra_keys()
        if set(fields) != {"step", "n_samples", "classes"} | extra_fields or (
                fields["step"] != "classes" or not (type(n) is int and 0 < n < 2**63)):
            fail("malformed classes reply.")
        classes = decode_values(fields["classes"], frame.arrays, fail)
        counts = frame.arrays.get("class_counts")
        balanced = isinstance(self.estimator.class_weight, str)
        expected = ({"class_counts"} if balanced else set()) | extra_arrays
        if "array" in fields["classes"]:
            expected.add(fields["classes"]["array"])
        if set(frame.arrays) != expected:
            fail("unexpected arrays in a classes reply.")
        try:
            distinct = (0 < classes.size <= n * self._labels_per_row(frame)
                        and _unique(classes).size == classes.size)
        except TypeError:
            distinct = False
        if not distinct:
            fail("its classes must be distinct labels, at most one per row.")
        if balanced and self._balance_by == "rows" and not (
                counts.dtype == np.int64 and counts.shape == classes.shape
                and np.all(counts > 0) and counts.sum() == n):
            fail("class counts must be positive and add up to its rows.")
        if balanced and self._balance_by == "weights" and not (
                counts.dtype == np.float64 and counts.shape == classes.shape
                and np.all(np.isfinite(counts)) and np.all(counts >= 0)
                and np.all(counts <= 1e75)):
            fail("class weight sums must be finite and non-negative, one per class.")
        return classes, counts, self._read_classes_extra(site, frame, classes)

    def _labels_per_row(self, frame):
        """Hook: how many labels a row of a classes reply may carry; one by default."""
        return 1

    def _read_classes_extra(self, site, frame, classes):
        """Hook: parse what ``_classes_extra`` added to a classes reply; nothing by default."""

    def apply(self, replies, ledger):
        if self.classes_ is not None:
            return self._apply_classified(replies, ledger)
        labels = sorted_labels(replies)
        try:
            classes = _unique(np.concatenate([replies[site][0] for site in labels]))
        except TypeError as exc:
            raise InvalidClientMessage(
                f"client {labels[-1]!r}: the sites' labels mix strings and numbers.", labels[-1]
            ) from exc
        counts = None
        if isinstance(self.estimator.class_weight, str):
            counts = np.zeros(classes.shape[0], dtype=replies[labels[0]][1].dtype)
            for site in labels:
                site_classes, site_counts, _ = replies[site]
                np.add.at(counts, _encode(site_classes, uniques=classes), site_counts)
        self.class_weight_ = np.asarray(
            class_weights(self.estimator.class_weight, classes, counts), dtype=np.float64
        )
        self.classes_ = classes
        self._after_classes(replies, ledger)

    def _after_classes(self, replies, ledger):
        """Hook: what a protocol learns from the classes round besides the classes.

        ``replies[site][2]`` is what :meth:`_read_classes_extra` parsed.
        """
