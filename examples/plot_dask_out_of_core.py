"""
==========================================================
A table that is never in memory: FederatedRidge on Dask
==========================================================

Each partition of a Dask DataFrame is made only when it is read (here from a
seed; in practice from Parquet files or a database). ``fit`` on the Dask
collection runs the estimator's own client role on every partition where it
lives, merges the partitions' statistics by a tree reduction and applies them
with the server role, so the model equals the in-memory fit, and the memory
used is a few partitions whatever the size of the table.

The ``hospital`` column names the site of every row: a site's rows may be
spread over many partitions (its statistics are merged before its message is
made). :func:`sklearn_fed.dask.partition_labels` makes each partition a site
instead, e.g. to hold out one partition at a time with
:class:`~sklearn_fed.FederatedRidgeCV`.
"""

import tracemalloc

import dask.dataframe as dd
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.linear_model import Ridge

from sklearn_fed import FederatedRidge, FederatedRidgeCV
from sklearn_fed.dask import partition_labels

FEATURES = ["age", "bmi", "blood_pressure", "glucose", "cholesterol"]


def make_partition(index, rows=20_000):
    """One partition of the table, made from its own seed when it is read."""
    rng = np.random.default_rng(index)
    frame = pd.DataFrame(rng.normal(size=(rows, len(FEATURES))), columns=FEATURES)
    frame["glucose"] += 100.0  # an offset: the statistics stay exact
    frame["hospital"] = rng.choice(["north", "south", "east"], size=rows)
    frame["outcome"] = frame[FEATURES].to_numpy() @ [1.0, -2.0, 0.5, 0.1, 0.0]
    frame["outcome"] += rng.normal(size=rows)
    return frame


def table(n_partitions):
    return dd.from_map(make_partition, range(n_partitions), meta=make_partition(0, rows=0))


def fit_with_peak_memory(n_partitions):
    frame = table(n_partitions)
    tracemalloc.start()
    model = FederatedRidge(alpha=1.0).fit(
        frame[FEATURES], frame["outcome"], clients=frame["hospital"]
    )
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return model, peak


# %%
# The model equals Ridge on the same rows (here small enough to check)
# ---------------------------------------------------------------------
model, _ = fit_with_peak_memory(8)
rows = pd.concat([make_partition(i) for i in range(8)])
ridge = Ridge(alpha=1.0).fit(rows[FEATURES], rows["outcome"])
print("sites:", model.clients_.tolist(), "features:", model.feature_names_in_.tolist())
print(f"largest difference to Ridge: {np.abs(model.coef_ - ridge.coef_).max():.1e}")

# %%
# Memory stays at a few partitions as the table grows
# ---------------------------------------------------
partitions = [4, 16, 64]
sizes, peaks = [], []
for n in partitions:
    _, peak = fit_with_peak_memory(n)
    sizes.append(n * make_partition(0, rows=20_000).memory_usage(deep=True).sum() / 2**20)
    peaks.append(peak / 2**20)
    print(f"{n:>3} partitions: table {sizes[-1]:6.0f} MiB, peak memory during fit "
          f"{peaks[-1]:5.1f} MiB")

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(sizes, sizes, "--", color="gray", label="the whole table in memory")
ax.plot(sizes, peaks, "o-", label="FederatedRidge.fit on the Dask table")
ax.set_xlabel("table size (MiB)")
ax.set_ylabel("peak memory (MiB)")
ax.legend()
fig.tight_layout()

# %%
# One partition held out at a time
# --------------------------------
frame = table(6)
cv = FederatedRidgeCV(alphas=[0.1, 10.0, 1000.0], cv="clients", store_cv_results=True).fit(
    frame[FEATURES], frame["outcome"], clients=partition_labels(frame)
)
best = list(cv.alphas).index(cv.alpha_)
print(f"alpha chosen by leave-one-partition-out CV: {cv.alpha_}; held-out R^2 of each "
      f"partition: {cv.cv_results_[:, best].round(3).tolist()}")
