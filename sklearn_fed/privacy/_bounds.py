"""Data-independent bounds: the clipping a private release needs, stated up front.

Differential privacy needs bounds on every row that do not come from the
rows themselves (a bound read from the data leaks it). :class:`RangeScaler`
turns ranges known in advance (a data dictionary, physical limits, census
caps) into rows of L2 norm at most 1, which is what
:class:`~sklearn_fed.PrivateFederatedRidge` with its default
``feature_bound=1`` expects. :class:`ClippingWarning` says when the bounds
given clip so much that the model is mostly fitted to clipped values.
"""

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin

from .._compat import check_is_fitted, validate_data

__all__ = ["ClippingWarning", "RangeScaler"]

#: A release warns when more than this share of rows is clipped.
CLIPPED_SHARE_WARNING = 0.1


class ClippingWarning(UserWarning):
    """Clipping to the stated bounds changed a large share of rows.

    Rows outside the bounds are scaled onto them; when that is most rows, the
    model describes the clipped values, not the data. State bounds that
    contain the data (for example with :class:`RangeScaler`).
    """


class RangeScaler(OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """Scale features from ranges known in advance so that every row has L2 norm <= 1.

    Feature ``j`` is clipped to ``[low_j, high_j]`` and mapped linearly onto
    ``[-1, 1] / sqrt(n_features)``. The ranges are parameters, never read
    from the data, so the scaler can sit in front of a differentially
    private estimator: ``fit`` only checks the number (and names) of the
    columns. Put it first in a pipeline with
    :class:`~sklearn_fed.PrivateFederatedRidge` and keep the default
    ``feature_bound=1``.

    Parameters
    ----------
    ranges : dict or array-like of shape (n_features, 2)
        ``{column name: (low, high)}`` for a DataFrame (every column must be
        named), or one ``(low, high)`` pair per column, in order.
        ``low < high``, both finite.

    Attributes
    ----------
    low_, high_ : ndarray of shape (n_features,)
        The ranges in column order.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features,)
        When ``X`` has string column names.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 10.0], [5.0, 30.0], [99.0, 20.0]])
    >>> scaler = RangeScaler([(0, 10), (10, 30)]).fit(X)
    >>> Xs = scaler.transform(X)
    >>> np.round(Xs * np.sqrt(2), 3)
    array([[-1., -1.],
           [ 0.,  1.],
           [ 1.,  0.]])
    >>> bool(np.all(np.linalg.norm(Xs, axis=1) <= 1))
    True
    """

    _parameter_constraints: dict = {"ranges": [dict, "array-like"]}

    def __init__(self, ranges):
        self.ranges = ranges

    def fit(self, X, y=None):
        """Check the columns against ``ranges`` (the values of ``X`` are not used).

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        self : RangeScaler
        """
        self._validate_params()
        validate_data(self, X, reset=True, ensure_all_finite="allow-nan")
        names = getattr(self, "feature_names_in_", None)
        if isinstance(self.ranges, dict):
            if names is None:
                raise ValueError("ranges given by column name need X with column names.")
            missing = [name for name in names if name not in self.ranges]
            extra = [name for name in self.ranges if name not in set(names)]
            if missing or extra:
                raise ValueError(
                    f"ranges must name every column of X: missing {missing}, unknown {extra}."
                )
            pairs = [self.ranges[name] for name in names]
        else:
            pairs = self.ranges
        pairs = np.asarray(pairs, dtype=np.float64)
        if pairs.shape != (self.n_features_in_, 2):
            raise ValueError(
                f"ranges must hold one (low, high) pair per feature ({self.n_features_in_}); "
                f"got shape {pairs.shape}."
            )
        if not (np.all(np.isfinite(pairs)) and np.all(pairs[:, 0] < pairs[:, 1])):
            raise ValueError("every range must be finite with low < high.")
        self.low_, self.high_ = pairs[:, 0].copy(), pairs[:, 1].copy()
        return self

    def transform(self, X):
        """Clip to the ranges and scale onto ``[-1, 1] / sqrt(n_features)``.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples, n_features)
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        middle = (self.high_ + self.low_) / 2
        half = (self.high_ - self.low_) / 2 * np.sqrt(self.n_features_in_)
        return (np.clip(X, self.low_, self.high_) - middle) / half
