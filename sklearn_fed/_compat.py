"""The one place that imports private scikit-learn API.

scikit-learn moves its private helpers between releases; keeping every such
import here means an upgrade breaks this file and nothing else.
"""

from sklearn.base import _fit_context
from sklearn.utils._param_validation import Interval, Options, StrOptions, validate_params
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

__all__ = [
    "Interval",
    "Options",
    "StrOptions",
    "_check_sample_weight",
    "_fit_context",
    "check_is_fitted",
    "validate_data",
    "validate_params",
]

from sklearn.utils._param_validation import validate_parameter_constraints  # noqa: E402

__all__ += ["validate_parameter_constraints"]


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


__all__ += ["scorer_parts"]
