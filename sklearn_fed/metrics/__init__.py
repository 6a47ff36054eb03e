"""Evaluation across sites: scikit-learn's metrics from the sums each site sends.

:class:`FederatedEvaluator` scores a fitted model over rows that never leave
their sites, pooled and per site, in one round; :func:`federated_score` is its
one-metric shortcut. See :doc:`/user_guide/evaluation`.
"""

from ._evaluate import FederatedEvaluator, federated_score
from ._stats import METRICS, parse_metric

__all__ = ["METRICS", "FederatedEvaluator", "federated_score", "parse_metric"]
