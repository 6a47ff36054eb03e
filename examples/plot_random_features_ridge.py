"""
Federated kernel ridge with random Fourier features
===================================================

One-shot federated ridge is exact for any model that is linear in its
parameters, so it covers kernel ridge approximated by random features (Sec.
VI-C of the one-shot federated ridge paper). :class:`~sklearn.kernel_approximation.RBFSampler`
maps inputs to ``D`` random Fourier features of the RBF kernel; with a fixed
``random_state`` (the seed every client is given) all clients compute the same
features, send the ``D x D`` statistics once, and the server solves. Here the
clients own different regions of the input space (strong heterogeneity) and the
target is non-linear: a linear model fails, the random-feature model recovers
the function, and the federated fit equals the centralized one.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.kernel_approximation import RBFSampler
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_squared_error
from sklearn.pipeline import make_pipeline

from sklearn_fed import FederatedRidge

rng = np.random.default_rng(0)


def target(X):
    return np.sin(3 * X[:, 0]) * np.cos(2 * X[:, 1]) + 0.5 * X[:, 0] ** 2


# Five clients, each sampling around its own centre: no client covers the domain.
centres = np.array([[-1.5, -1.0], [-0.5, 1.0], [0.5, -0.5], [1.5, 1.0], [0.0, 0.0]])
clients = np.repeat(np.arange(5), 400)
X = centres[clients] + 0.6 * rng.normal(size=(2000, 2))
y = target(X) + 0.1 * rng.normal(size=2000)
X_test = rng.uniform(-2, 2, size=(2000, 2))
y_test = target(X_test)

features = RBFSampler(gamma=1.0, n_components=400, random_state=0)  # the shared seed
linear = FederatedRidge(alpha=1e-3).fit(X, y, clients=clients)
federated = make_pipeline(features, FederatedRidge(alpha=1e-3))
federated.fit(X, y, federatedridge__clients=clients)
centralized = make_pipeline(RBFSampler(gamma=1.0, n_components=400, random_state=0),
                            Ridge(alpha=1e-3)).fit(X, y)

for name, model in [("linear FederatedRidge", linear),
                    ("RBFSampler -> FederatedRidge", federated),
                    ("RBFSampler -> Ridge (centralized)", centralized)]:
    print(f"{name:36s} test MSE {mean_squared_error(y_test, model.predict(X_test)):.4f}")
gap = np.abs(federated[-1].coef_ - centralized[-1].coef_).max()
print(f"max |federated - centralized coef| = {gap:.1e}")
print(f"uplink per client: {federated[-1].communication_.uplink_bytes // 5:,} bytes, one round")

# %%
# Predictions along the slice ``x2 = 0``.
grid = np.c_[np.linspace(-2, 2, 200), np.zeros(200)]
plt.figure(figsize=(5.5, 3.5))
plt.plot(grid[:, 0], target(grid), "k", lw=3, alpha=0.3, label="true function")
plt.plot(grid[:, 0], linear.predict(grid), "--", label="linear FederatedRidge")
plt.plot(grid[:, 0], federated.predict(grid), label="random features + FederatedRidge")
plt.xlabel("x1 (x2 = 0)")
plt.ylabel("prediction")
plt.legend(fontsize=8)
plt.tight_layout()
plt.show()
