"""The one place that imports private scikit-learn API.

scikit-learn moves its private helpers between releases; keeping every such
import here means an upgrade breaks this file and nothing else.
"""

from sklearn.base import _fit_context
from sklearn.decomposition._pca import _infer_dimension
from sklearn.preprocessing._data import _handle_zeros_in_scale, _is_constant_feature
from sklearn.utils._encode import _check_unknown, _encode, _unique
from sklearn.utils._mask import _get_mask
from sklearn.utils._missing import is_scalar_nan
from sklearn.utils._param_validation import (
    Interval,
    Options,
    StrOptions,
    validate_parameter_constraints,
)
from sklearn.utils.validation import (
    FLOAT_DTYPES,
    _check_feature_names_in,
    _check_sample_weight,
    check_is_fitted,
    validate_data,
)

__all__ = [
    "FLOAT_DTYPES",
    "Interval",
    "Options",
    "StrOptions",
    "_check_feature_names_in",
    "_check_sample_weight",
    "_check_unknown",
    "_encode",
    "_fit_context",
    "_get_mask",
    "_handle_zeros_in_scale",
    "_infer_dimension",
    "_is_constant_feature",
    "_unique",
    "check_is_fitted",
    "is_scalar_nan",
    "scorer_parts",
    "validate_data",
    "validate_parameter_constraints",
]


def scorer_parts(scorer):
    """``(score_func, sign, kwargs, response_method)`` of a scorer made by ``make_scorer``.

    ``(None, 1, {}, None)`` for any other callable. Scorer objects keep these
    in private attributes; reading them here keeps that in one file.
    """
    return (
        getattr(scorer, "_score_func", None),
        getattr(scorer, "_sign", 1),
        dict(getattr(scorer, "_kwargs", {}) or {}),
        getattr(scorer, "_response_method", None),
    )
