import numpy as np, time, os, sys
from threadpoolctl import threadpool_limits
sys.path.insert(0, "benchmarks"); import bench_dask
from sklearn_fed.statistics import ClientStatistics
from sklearn.utils import check_array
d = "/tmp/prof_table"
if not os.path.exists(d): bench_dask.build_table(d, 500_000, 100, 250_000)
B = np.load(d + "/0.npy")   # in memory
X, y = B[:, :100], B[:, 100]
def t(f, k=5):
    best = 1e9
    for _ in range(k):
        c = time.process_time(); f(); best = min(best, time.process_time() - c)
    return best
with threadpool_limits(1, "blas"):
    for r in range(2):
        print("syrk [X y]   %.3f" % t(lambda: bench_dask._syrk(B)))
        print("stats        %.3f" % t(lambda: ClientStatistics.from_data(X, y)))
        print("check_array  %.3f" % t(lambda: check_array(X, dtype=np.float64)))
        print("XtX view     %.3f" % t(lambda: X.T @ X))
