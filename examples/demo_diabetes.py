"""The `make demo` script: FederatedRidge on simulated clients of the diabetes data.

For a few client counts, rows of sklearn's diabetes data are dealt to clients at
random; each client sends its sufficient statistics once; the server solves.
Printed: the distance of the federated coefficients to sklearn's Ridge on the
pooled rows (it is round-off), and the bytes each protocol moved.
"""

import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge

from sklearn_fed import FederatedRidge


def main():
    X, y = load_diabetes(return_X_y=True)
    rng = np.random.default_rng(0)
    central = Ridge(alpha=1.0).fit(X, y)
    print(f"diabetes: {X.shape[0]} rows, {X.shape[1]} features; Ridge(alpha=1.0) on pooled rows\n")
    header = (
        f"{'clients':>7} | {'max |coef - Ridge|':>18} | {'|intercept diff|':>16} | "
        f"{'uplink bytes':>12} | {'per client':>10} | {'FedAvg-200 uplink':>17}"
    )
    print(header)
    print("-" * len(header))
    for n_clients in (1, 2, 5, 10, 50, 200):
        clients = rng.integers(0, n_clients, size=X.shape[0])
        fed = FederatedRidge(alpha=1.0).fit(X, y, clients=clients)
        ledger = fed.communication_
        print(
            f"{fed.n_clients_:>7} | {np.abs(fed.coef_ - central.coef_).max():>18.2e} | "
            f"{abs(fed.intercept_ - central.intercept_):>16.2e} | {ledger.uplink_bytes:>12,} | "
            f"{ledger.uplink_bytes // fed.n_clients_:>10,} | "
            f"{ledger.fedavg_equivalent(200)['uplink_bytes']:>17,}"
        )
    print("\nOne round, one message per client; the result equals centralized Ridge.")


if __name__ == "__main__":
    main()
