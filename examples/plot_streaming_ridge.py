"""
==========================================================
Streaming federated ridge: R^2 per round against SGD
==========================================================

Twenty clients receive new rows every round; each round is one call to
:meth:`~sklearn_fed.IncrementalFederatedRidge.partial_fit` (a FedDelta
round: a gossip-elected leader merges the clients' compact messages and
updates the regularized system with a low-rank update). After every round
the model equals :class:`~sklearn.linear_model.Ridge` fitted on all rows
seen so far, so its held-out R^2 is the best a ridge model can do with that
data. :class:`~sklearn.linear_model.SGDRegressor` sees the same rows through
``partial_fit`` and is still converging.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_regression
from sklearn.linear_model import Ridge, SGDRegressor
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sklearn_fed import IncrementalFederatedRidge

X, y = make_regression(n_samples=5000, n_features=40, n_informative=15, noise=20.0,
                       random_state=0)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)
scaler = StandardScaler().fit(X_train)
X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)

n_clients, rows_per_client = 20, 3
rng = np.random.default_rng(0)
fed = IncrementalFederatedRidge(alpha=1.0, random_state=0)
sgd = SGDRegressor(random_state=0)
scores_fed, scores_sgd, max_gap = [], [], 0.0
batches = np.array_split(np.arange(len(y_train)), len(y_train) // (n_clients * rows_per_client))
for batch in batches:
    clients = rng.integers(0, n_clients, size=len(batch))
    fed.partial_fit(X_train[batch], y_train[batch], clients=clients)
    sgd.partial_fit(X_train[batch], y_train[batch])
    scores_fed.append(r2_score(y_test, fed.predict(X_test)))
    scores_sgd.append(r2_score(y_test, sgd.predict(X_test)))
    seen = slice(0, batch[-1] + 1)
    ridge = Ridge(alpha=1.0).fit(X_train[seen], y_train[seen])
    max_gap = max(max_gap, np.abs(fed.coef_ - ridge.coef_).max() / np.abs(ridge.coef_).max())

routes = [h["update"] for h in fed.round_history_]
print(f"rounds: {fed.n_rounds_}, routes used: {sorted(set(routes))}")
print(f"largest coefficient gap to Ridge on the rows seen, over all rounds: {max_gap:.1e}")
print(f"final R^2: federated ridge {scores_fed[-1]:.4f}, SGD {scores_sgd[-1]:.4f}")

fig, ax = plt.subplots(figsize=(7, 4))
rounds = np.arange(1, len(batches) + 1)
ax.plot(rounds, scores_fed, label="IncrementalFederatedRidge (= Ridge on rows seen)")
ax.plot(rounds, scores_sgd, label="SGDRegressor.partial_fit")
ax.set_xlabel("round (20 clients, ~60 new rows per round)")
ax.set_ylabel("held-out $R^2$")
ax.set_ylim(-0.1, 1.0)
ax.legend(loc="lower right")
ax.set_title("One pass over a stream")
fig.tight_layout()
plt.show()
