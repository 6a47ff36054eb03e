"""FederatedOneHotEncoder: categories as the sorted union of the sites' category sets."""

import numpy as np
from sklearn.base import clone
from sklearn.preprocessing import OneHotEncoder
from sklearn.utils import check_array

from .._compat import (
    _check_unknown,
    _encode,
    _unique,
    is_scalar_nan,
    validate_data,
)
from ..protocol import CountedValues, encode_values, sorted_labels
from ..protocol._fields import reply_dtype, reply_value_counts
from ._base import FederatedTransformerMixin, OneRoundServer, TransformerClient

__all__ = ["FederatedOneHotEncoder"]

# Fitted attributes OneHotEncoder.fit sets besides n_features_in_ and feature_names_in_.
_FITTED = (
    "categories_", "drop_idx_", "_drop_idx_after_grouping", "_infrequent_enabled",
    "_default_to_infrequent_mappings", "_infrequent_indices", "_n_features_outs",
)


def _same_kind(i, categories):
    """Refuse column ``i`` when the sites' categories are of different kinds.

    Numbers, bytes and text (str or objects) do not mix: numpy would silently turn
    them into one another on concatenation (``b"a"`` into ``"a"``, ``1.0``
    into ``b"1.0"``). The sites are named by kind; which one is wrong is not
    for the server to guess.
    """
    kinds = {}
    for site, values in categories.items():
        kind = "number" if values.dtype.kind in "iufb" else "bytes" if (
            values.dtype.kind == "S") else "text or objects"
        kinds.setdefault(kind, []).append(site)
    if len(kinds) > 1:
        raise ValueError(
            f"column {i}: the sites' categories are of different kinds: "
            + "; ".join(f"{kind} at {sites}" for kind, sites in sorted(kinds.items()))
        )


class OneHotEncoderClient(TransformerClient):
    """A site of :class:`FederatedOneHotEncoder`: per column its category set (and counts)."""

    protocol = "preprocessing.onehot_encoder"
    # Categories counted fewer than the site policy's min_count times are not sent
    # (suppressed); the counts travel only when infrequent categories are grouped.
    disclosure = (CountedValues("columns", counts="n{i}",
                                send_counts=lambda role: role.estimator._needs_counts()),)

    def compute(self, task, X, y, sample_weight, rows):
        X, _ = self._site_rows(X, None, rows)
        columns, n_samples, _ = self.estimator._check_X(X, ensure_all_finite="allow-nan")
        fields, arrays = {"n_samples": int(n_samples), "columns": []}, {}
        for i, column in enumerate(columns):
            categories, frequency = _unique(column, return_counts=True)
            fields["columns"].append(encode_values(categories, f"c{i}", arrays))
            arrays[f"n{i}"] = np.asarray(frequency, dtype=np.int64)
        return fields, arrays


class OneHotEncoderServer(OneRoundServer):
    """Server of :class:`FederatedOneHotEncoder`: union of category sets, summed counts."""

    protocol = "preprocessing.onehot_encoder"

    def read_reply(self, site, frame):
        def fail(reason):
            self._fail(site, reason)

        n, columns = frame.fields.get("n_samples"), frame.fields.get("columns")
        if set(frame.fields) != {"n_samples", "columns"} or not (type(n) is int and 0 < n < 2**63):
            fail("malformed encoder reply.")
        d = frame.schema["n_features"]
        if not (isinstance(columns, list) and len(columns) == d):
            fail(f"must describe {d} columns.")
        counts = self.estimator._needs_counts()
        expected = {f"c{i}" for i, c in enumerate(columns) if isinstance(c, dict) and "array" in c}
        expected |= {f"n{i}" for i in range(d)} if counts else set()
        if set(frame.arrays) != expected:
            fail("its arrays do not match its columns.")
        parsed = []
        rows = reply_dtype(frame)
        for i, descriptor in enumerate(columns):
            # counts below n_samples when the site's policy suppressed rare categories
            categories, frequency = reply_value_counts(
                frame, descriptor, f"n{i}" if counts else None, site, i, at_most=n)
            # float categories are values of the site's rows, never infinite; float32 rows
            # have float32 categories (a table's float32 column may come with float64 rows)
            if categories.dtype.kind == "f" and (np.isinf(categories).any() or (
                    rows == np.float32 and categories.dtype != rows)):
                fail(f"column {i}: float categories must be finite (or NaN), of the rows' "
                     "dtype.")
            parsed.append((categories, frequency))
        return n, parsed

    def _model(self, replies):
        labels = sorted_labels(replies)
        n_samples = sum(replies[site][0] for site in labels)
        for i in range(self.schema.n_features):
            _same_kind(i, {site: replies[site][1][i][0] for site in labels})
        fitted = self.estimator._fitted_from(
            n_samples, [[replies[site][1][i] for site in labels]
                        for i in range(self.schema.n_features)]
        )
        return fitted, sum(fitted["_n_features_outs"])


class FederatedOneHotEncoder(FederatedTransformerMixin, OneHotEncoder):
    """:class:`~sklearn.preprocessing.OneHotEncoder` whose categories are the union of the sites'.

    Each site sends, per column, its set of distinct values (and, only when
    infrequent categories are grouped, how often each occurs); the server
    takes their sorted union (scikit-learn's own sort: missing values last),
    sums the counts, and sets ``categories_``, ``drop_idx_`` and the
    infrequent-category mappings with OneHotEncoder's own code, so
    ``handle_unknown``, ``drop``, ``min_frequency`` and ``max_categories``
    behave exactly as on the pooled rows. Category sets are what this model
    is made of; they are the only thing a site reveals. A deployed site's
    :class:`~sklearn_fed.protocol.SitePolicy` suppresses categories it holds
    fewer than ``min_count`` times (3 by default): they are then unknown to
    the model (``handle_unknown="ignore"`` encodes them as zeros); see
    :doc:`/disclosure`.

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    categories, drop, sparse_output, dtype, handle_unknown, min_frequency, \
max_categories, feature_name_combiner
        As in :class:`~sklearn.preprocessing.OneHotEncoder`.

    Attributes
    ----------
    categories_, drop_idx_, infrequent_categories_, n_features_in_, feature_names_in_
        As in :class:`~sklearn.preprocessing.OneHotEncoder`, for the pooled rows.
    clients_ : ndarray of shape (`n_clients_`,)
    n_clients_ : int
    communication_ : CommunicationLedger

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.preprocessing import FederatedOneHotEncoder
    >>> X = np.array([["red"], ["blue"], ["green"], ["red"]], dtype=object)
    >>> enc = FederatedOneHotEncoder(sparse_output=False).fit(X, clients=[0, 0, 1, 1])
    >>> enc.categories_
    [array(['blue', 'green', 'red'], dtype=object)]
    >>> enc.transform([["green"]])
    array([[0., 1., 0.]])
    """

    _server_role = OneHotEncoderServer
    _client_role = OneHotEncoderClient
    _broadcast_attributes = _FITTED

    def _needs_counts(self):
        return self.max_categories is not None or self.min_frequency is not None

    def _validate_rows(self, X, *, reset):
        """OneHotEncoder's checks; DataFrames are kept as they are (column dtypes matter)."""
        validate_data(self, X=X, reset=reset, skip_check_array=True)
        if hasattr(X, "iloc") and getattr(X, "ndim", 0) == 2:
            self._check_X(X, ensure_all_finite="allow-nan")
            return X
        checked = check_array(X, dtype=None, ensure_all_finite="allow-nan")
        if not hasattr(X, "dtype") and np.issubdtype(checked.dtype, np.str_):
            checked = check_array(X, dtype=object, ensure_all_finite="allow-nan")
        return checked

    def _fitted_from(self, n_samples, columns):
        """OneHotEncoder's fitted attributes from each column's ``[(categories, counts)]``.

        Runs OneHotEncoder's own steps (infrequent mapping, drop indices) on a
        scratch copy, so a failure leaves this estimator untouched.
        """
        scratch = clone(self)
        scratch._check_infrequent_enabled()
        if self.categories != "auto" and len(self.categories) != len(columns):
            raise ValueError(
                "Shape mismatch: if categories is an array, it has to be of shape (n_features,)."
            )
        categories_, all_counts = [], []
        for i, parts in enumerate(columns):
            seen = np.concatenate([categories for categories, _ in parts])
            if seen.size == 0 and self.categories == "auto":
                raise ValueError(
                    f"column {i}: no site released a category (each was seen fewer times "
                    "than the sites' disclosure threshold min_count); pass categories=, or "
                    "fit with sites that hold more rows of each category.")
            if self.categories == "auto":
                categories = _unique(seen)
            else:
                categories = self._given_categories(i, seen)
            if scratch._infrequent_enabled:
                total = np.zeros(categories.shape[0], dtype=np.int64)
                for site_categories, frequency in parts:
                    known = _check_unknown(site_categories, categories, return_mask=True)[1]
                    if not known.any():
                        # given categories, none of them at this site (ignored, as the
                        # pooled counts ignore them); an empty encoding is a float index
                        continue
                    index = _encode(site_categories[known], uniques=categories,
                                    check_unknown=False)
                    np.add.at(total, index, frequency[known])
                all_counts.append(total)
            categories_.append(categories)
        scratch.categories_ = categories_
        if scratch._infrequent_enabled:
            scratch._fit_infrequent_category_mapping(n_samples, all_counts, {})
        scratch._set_drop_idx()
        scratch._n_features_outs = scratch._compute_n_features_outs()
        return {name: getattr(scratch, name) for name in _FITTED if hasattr(scratch, name)}

    def _given_categories(self, i, seen):
        """User-given categories of column ``i``, checked as OneHotEncoder checks them."""
        # as OneHotEncoder: str columns get object categories (no truncation), others
        # (bytes included) the column's dtype; `seen` (the sites' categories) has it
        dtype = object if seen.dtype.kind == "U" else seen.dtype
        categories = np.array(self.categories[i], dtype=dtype)
        if (categories.dtype == object and isinstance(categories[0], bytes)
                and seen.dtype.kind != "S"):
            raise ValueError(
                f"In column {i}, the predefined categories have type 'bytes' which is "
                f"incompatible with values of type '{type(seen[0]).__name__}'."
            )
        if any(is_scalar_nan(category) for category in categories[:-1]):
            raise ValueError(
                "Nan should be the last element in user provided categories, see "
                f"categories {categories} in column #{i}"
            )
        if categories.size != len(_unique(categories)):
            raise ValueError(
                f"In column {i}, the predefined categories contain duplicate elements.")
        if seen.dtype.kind not in "OUS":
            ordered = np.sort(categories)
            stop = -1 if np.isnan(ordered[-1]) else None
            if np.any(ordered[:stop] != categories[:stop]):
                raise ValueError("Unsorted categories are not supported for numerical categories")
        if self.handle_unknown == "error":
            unknown = _check_unknown(seen, categories)
            if unknown:
                raise ValueError(
                    f"Found unknown categories {unknown} in column {i} during fit"
                )
        return categories

    def _check_before_rows(self, *, partial):
        self._check_infrequent_enabled()
