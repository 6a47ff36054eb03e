"""The `make demo` script: FederatedRidge on simulated clients of the diabetes data.

For a few client counts, rows of sklearn's diabetes data are dealt to clients at
random; each client sends its sufficient statistics once; the server solves.
Printed: the distance of the federated coefficients to sklearn's Ridge on the
pooled rows (it is round-off), the bytes the clients uploaded, and, for scale,
what 200 rounds of FedAvg on the same model and clients would have uploaded.
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
    n_parameters = X.shape[1] + 1  # coefficients and intercept: what FedAvg sends each round
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
    print(
        "\nclients: distinct clients holding rows (each row gets one of N labels at random,"
        "\n  so with N=200 some labels get no row)."
        "\nuplink bytes: the real size of the messages the clients sent, one each, once"
        "\n  (headers, means, the packed upper triangle of X^T X, X^T y)."
        f"\nFedAvg-200 uplink: what 200 rounds of FedAvg on the same clients would upload:"
        f"\n  every client sends the model ({n_parameters} float64 values) every round,"
        f"\n  200 x {n_parameters} x 8 bytes x clients (Theorem 4 of the one-shot paper),"
        "\n  and downloads as much again. One-shot sends once, and its result is exact."
    )


if __name__ == "__main__":
    main()
