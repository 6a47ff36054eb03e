"""FederatedRidge on a table larger than memory, beside the BLAS floor, dask-ml and TSQR.

Builds a float64 table of ``--rows`` x (``--features`` + 1) on disk (the last
column is y) as a stack of ``.npy`` files, one per partition
(:func:`dask.array.to_npy_stack`; read back memory-mapped with
:func:`dask.array.from_npy_stack`), then, each in a fresh process so that its
peak RSS is its own:

* ``FederatedRidge().fit(X, y)`` on the whole table (Dask threaded scheduler);
* the BLAS floor: one pass over the same partition files, one per core at a
  time, each memory-mapped (as Dask reads them) and multiplied out by
  ``dsyrk`` (``[X y]^T [X y]``, one BLAS thread per core, as the Dask run);
  the same syrk calls on partitions already in memory give the compute floor;
* on the first ``--subset-rows`` rows (the competitors cannot finish the
  whole table in reasonable time, see the printed notes): FederatedRidge
  again, :func:`dask.array.linalg.lstsq` (TSQR, exact but unregularized) and
  dask-ml's ``LinearRegression`` (iterative, ``lbfgs``), with the largest
  coefficient difference to FederatedRidge.

FederatedRidge and the floor runs are interleaved, ``--repeats`` times; the
table reports medians, and the ratios are medians over the pairs of adjacent
runs (the machine may be shared). The table is deleted at the end (``--keep`` keeps it).

Usage::

    python benchmarks/bench_dask.py                    # 4e7 x 100: a 32 GB table
    python benchmarks/bench_dask.py --quick            # 2e6 x 20, seconds
"""

import argparse
import json
import mmap
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

_GB = 1e9


# ------------------------------------------------------------------ the table
def _block(block_info=None):
    """Partition ``i`` of the table, from its own seed: [X, y] with y = X beta + noise."""
    info = block_info[None]
    n, p = info["chunk-shape"]
    rng = np.random.default_rng([7, info["chunk-location"][0]])
    block = np.empty((n, p))
    block[:, :-1] = rng.standard_normal((n, p - 1))
    beta = np.linspace(-1.0, 1.0, p - 1)
    block[:, -1] = block[:, :-1] @ beta + 3.0 + rng.standard_normal(n)
    return block


def build_table(directory, rows, features, chunk_rows):
    import dask.array as da

    chunks = (tuple(min(chunk_rows, rows - start) for start in range(0, rows, chunk_rows)),
              (features + 1,))
    table = da.map_blocks(_block, chunks=chunks, dtype=np.float64)
    da.to_npy_stack(directory, table, axis=0)
    return table.nbytes


def _load(directory, rows):
    import dask.array as da

    table = da.from_npy_stack(directory, mmap_mode="r")
    if rows < table.shape[0]:
        table = table[:rows]
    return table[:, :-1], table[:, -1]


# ---------------------------------------------------------------- measurements
def _peak_rss():
    """Peak resident set size of this process, in bytes.

    ``VmHWM`` belongs to the process's own address space, which ``exec``
    replaces; ``ru_maxrss`` would also count the parent's memory at ``fork``.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # not Linux


def run_federated_ridge(directory, rows):
    from sklearn_fed import FederatedRidge

    X, y = _load(directory, rows)
    start = time.perf_counter()
    model = FederatedRidge(alpha=1.0).fit(X, y)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "coef": model.coef_.tolist(),
            "intercept": float(model.intercept_)}


def _partition_files(directory, rows):
    """``(path, rows to use)`` of the partition files holding the first ``rows`` rows."""
    import dask.array as da

    files, done = [], 0
    for i, n in enumerate(da.from_npy_stack(directory).chunks[0]):
        if done >= rows:
            break
        files.append((os.path.join(directory, f"{i}.npy"), min(n, rows - done)))
        done += files[-1][1]
    return files


def _syrk(block):
    """``block^T block`` (upper triangle) by BLAS dsyrk, reading the rows in place."""
    from scipy.linalg.blas import dsyrk

    return dsyrk(1.0, block.T, trans=0, lower=0)  # block.T is Fortran-ordered: no copy


def run_floor(directory, rows):
    """The BLAS floor, with the machine used as the Dask run uses it.

    One partition per core at a time, one BLAS thread each. ``seconds``: a
    pass over the files (each read into memory, then syrk); ``syrk_seconds``:
    the same syrk calls on partitions already in memory.
    """
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    files = _partition_files(directory, rows)
    threads = os.cpu_count()

    def read_and_syrk(file):
        path, n = file
        # memory-mapped and read ahead, as dask.array.from_npy_stack gives it to
        # FederatedRidge (sklearn_fed.dask advises the kernel to read a partition whole)
        block = np.load(path, mmap_mode="r")
        if hasattr(mmap, "MADV_WILLNEED"):
            block._mmap.madvise(mmap.MADV_WILLNEED)
        return _syrk(block[:n])

    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        gram = sum(pool.map(read_and_syrk, files))
        seconds = time.perf_counter() - start
        in_memory = [np.load(path) for path, _ in files[:threads]]
        start = time.perf_counter()
        sum(pool.map(lambda j: _syrk(in_memory[j % threads][: files[j][1]]), range(len(files))))
        syrk_seconds = time.perf_counter() - start
    return {"seconds": seconds, "syrk_seconds": syrk_seconds, "trace": float(np.trace(gram))}


def run_lstsq(directory, rows):
    import dask.array as da

    X, y = _load(directory, rows)
    design = da.concatenate([X, da.ones((X.shape[0], 1), chunks=(X.chunks[0], 1))], axis=1)
    start = time.perf_counter()
    solution = da.linalg.lstsq(design.rechunk({1: -1}), y)[0].compute()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "coef": solution[:-1].tolist(), "intercept": float(solution[-1])}


def run_dask_ml(directory, rows):
    from dask_ml.linear_model import LinearRegression

    X, y = _load(directory, rows)
    start = time.perf_counter()
    model = LinearRegression(penalty="l2", C=1.0, solver="lbfgs", max_iter=100).fit(X, y)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "coef": np.ravel(model.coef_).tolist(),
            "intercept": float(np.ravel(model.intercept_)[0])}


RUNS = {"federated_ridge": run_federated_ridge, "floor": run_floor, "lstsq": run_lstsq,
        "dask_ml": run_dask_ml}


def _worker(method, directory, rows):
    result = RUNS[method](directory, rows)
    result["peak_rss"] = _peak_rss()
    print(json.dumps(result), flush=True)


def measure(method, directory, rows, timeout):
    """Run one measurement in a fresh process; None when it ran out of time or failed."""
    import sklearn_fed

    command = [sys.executable, __file__, "--worker", method, "--dir", directory,
               "--rows", str(rows)]
    # the worker imports the same sklearn_fed as this process
    source = os.path.dirname(os.path.dirname(os.path.abspath(sklearn_fed.__file__)))
    path = os.pathsep.join([source] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                              env=dict(os.environ, PYTHONPATH=path))
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- report
def _load_average():
    """The 1-minute load average: other processes on the cores skew every timing."""
    return f"{os.getloadavg()[0]:.1f}"


def _row(name, rows, width, results):
    ok = [r for r in results if "seconds" in r]
    if not ok:
        reason = results[0].get("timeout")
        what = f"did not finish in {reason:.0f} s" if reason else f"failed: {results[0]}"
        print(f"{name:<44} {rows:>11,} {what}")
        return None
    seconds = float(np.median([r["seconds"] for r in ok]))
    peak = max(r["peak_rss"] for r in ok) / _GB
    gbps = rows * width * 8 / _GB / seconds
    print(f"{name:<44} {rows:>11,} {seconds:>9.1f} {rows / seconds / 1e6:>9.2f} "
          f"{gbps:>7.2f} {peak:>9.2f}")
    return seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40_000_000)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--chunk-rows", type=int, default=250_000)
    parser.add_argument("--subset-rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds allowed to each competitor run")
    parser.add_argument("--dir", default=None, help="where to build the table (default: a "
                        "temporary directory under /work, or $TMPDIR)")
    parser.add_argument("--keep", action="store_true", help="keep the table")
    parser.add_argument("--quick", action="store_true", help="2e6 x 20, a few seconds")
    parser.add_argument("--worker", choices=sorted(RUNS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args.worker, args.dir, args.rows)
    if args.quick:
        args.rows, args.features = 2_000_000, 20
        args.chunk_rows, args.subset_rows = 100_000, 500_000
        args.repeats = min(args.repeats, 2)

    import psutil

    width = args.features + 1
    table_bytes = args.rows * width * 8
    parent = args.dir or tempfile.gettempdir()
    os.makedirs(parent, exist_ok=True)
    free = shutil.disk_usage(parent).free
    memory = psutil.virtual_memory().total
    print(f"table {args.rows:,} x {width} float64 = {table_bytes / _GB:.1f} GB; memory "
          f"{memory / _GB:.1f} GB; free disk at {parent}: {free / _GB:.1f} GB; "
          f"{os.cpu_count()} cores; load average {_load_average()}")
    if free < table_bytes * 1.05 + 2 * _GB:
        raise SystemExit("not enough free disk for the table; pass --dir or fewer --rows")
    directory = tempfile.mkdtemp(prefix="bench_dask_", dir=parent)
    table = os.path.join(directory, "table")
    try:
        start = time.perf_counter()
        build_table(table, args.rows, args.features, args.chunk_rows)
        print(f"built in {time.perf_counter() - start:.0f} s ({args.chunk_rows:,} rows per "
              f"partition, {args.chunk_rows * width * 8 / 2**20:.0f} MiB)", flush=True)
        full = {"federated_ridge": [], "floor": []}
        for repeat in range(args.repeats):  # interleaved: both see the same machine
            for method in ("federated_ridge", "floor"):
                result = measure(method, table, args.rows, args.timeout)
                full[method].append(result)
                print(f"  repeat {repeat}: {method} "
                      + " ".join(f"{k}={v:.3g}" for k, v in result.items()
                                 if isinstance(v, float) or k == "peak_rss")
                      + f" load={_load_average()}", flush=True)
        subset = min(args.subset_rows, args.rows)
        partial = {m: [measure(m, table, subset, args.timeout)]
                   for m in ("federated_ridge", "lstsq", "dask_ml")}
        report(args, width, full, partial, subset)
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


def report(args, width, full, partial, subset):
    print()
    print(f"{'run':<44} {'rows':>11} {'seconds':>9} {'Mrows/s':>9} {'GB/s':>7} {'peak GB':>9}")
    print("-" * 94)
    fed = _row("FederatedRidge, whole table (dask)", args.rows, width, full["federated_ridge"])
    floor = [r for r in full["floor"] if "seconds" in r]
    _row("floor: read + syrk, whole table", args.rows, width, floor)
    compute = [dict(r, seconds=r["syrk_seconds"]) for r in floor]
    syrk = _row("floor: syrk alone (partitions in memory)", args.rows, width, compute)
    base = partial["federated_ridge"][0]
    for name, key in (("FederatedRidge, subset (dask)", "federated_ridge"),
                      ("dask.array.linalg.lstsq (TSQR), subset", "lstsq"),
                      ("dask-ml LinearRegression (lbfgs), subset", "dask_ml")):
        _row(name, subset, width, partial[key])
    print()
    pairs = [(f, r) for f, r in zip(full["federated_ridge"], full["floor"])
             if "seconds" in f and "seconds" in r]
    if fed and syrk and pairs:
        # each run beside the floor measured next to it: the machine is shared
        for name, key in (("syrk floor", "syrk_seconds"), ("read+syrk floor", "seconds")):
            ratios = [f["seconds"] / r[key] for f, r in pairs]
            print(f"FederatedRidge / {name}: {np.median(ratios):.2f}x (median of "
                  f"{len(ratios)} interleaved pairs; min {min(ratios):.2f}x, max "
                  f"{max(ratios):.2f}x)")
    print(f"load average at the end: {_load_average()} ({os.cpu_count()} cores)")
    for key in ("lstsq", "dask_ml"):
        other = partial[key][0]
        if "coef" in other and "coef" in base:
            gap = np.max(np.abs(np.subtract(other["coef"], base["coef"])))
            print(f"max |coef - FederatedRidge coef| on the subset, {key}: {gap:.2e}"
                  + ("  (alpha=1 vs unregularized)" if key == "lstsq" else
                     "  (dask-ml's C=1 penalty is scaled differently)"))


if __name__ == "__main__":
    main()
