"""Deployable model selection: searches and cross-validation whose folds are defined at the sites.

A search is one protocol run (so one Flower run): every candidate and fold is
fitted by the base estimator's own protocol and scored by
:mod:`sklearn_fed.metrics`. See :doc:`/user_guide/evaluation`.
"""

from ._search import (
    FederatedGridSearchCV,
    FederatedRandomizedSearchCV,
    federated_cross_validate,
)
from ._split import LeaveSitesOut, SiteKFold

__all__ = [
    "FederatedGridSearchCV",
    "FederatedRandomizedSearchCV",
    "LeaveSitesOut",
    "SiteKFold",
    "federated_cross_validate",
]
