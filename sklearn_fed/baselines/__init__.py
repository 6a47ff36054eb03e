"""Gradient-based federated baselines for linear regression.

FedAvg, FedProx, FedNova and DP-FedAvg on ridge's objective: the iterative
methods the exact one-shot estimators of :mod:`sklearn_fed.linear_model` are
compared against. One shared round loop (``_base.py``), vectorized across
clients; the estimators differ only in the local step and the aggregation.
"""

from ._base import BaseFederatedSGD
from ._dp_fedavg import DPFedAvgRegressor
from ._fedavg import FedAvgRegressor
from ._fednova import FedNovaRegressor
from ._fedprox import FedProxRegressor

__all__ = [
    "BaseFederatedSGD",
    "DPFedAvgRegressor",
    "FedAvgRegressor",
    "FedNovaRegressor",
    "FedProxRegressor",
]
