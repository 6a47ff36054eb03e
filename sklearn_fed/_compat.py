"""The one place that imports private scikit-learn API.

scikit-learn moves its private helpers between releases; keeping every such
import here means an upgrade breaks this file and nothing else.
"""

from sklearn.base import _fit_context
from sklearn.utils._mask import _get_mask
from sklearn.utils._param_validation import Interval, Options, StrOptions, validate_params
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

__all__ = [
    "Interval",
    "Options",
    "StrOptions",
    "_check_sample_weight",
    "_fit_context",
    "_get_mask",
    "check_is_fitted",
    "validate_data",
    "validate_params",
]

from sklearn.utils._param_validation import validate_parameter_constraints  # noqa: E402

__all__ += ["validate_parameter_constraints"]
