"""FedMPDDClassifier with default parameters on standard tables, raw and standardized.

Run: python benchmarks/bench_fedmpdd_defaults.py [--seeds 4]

Prints the test accuracy range over ``random_state`` 0..seeds-1 (25% held
out, stratified), whether "training did not progress" was warned, and
scikit-learn's MLPClassifier with its defaults beside it.
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package
from sklearn_fed import FedMPDDClassifier  # noqa: E402

DATA = {"digits": load_digits, "breast cancer": load_breast_cancer, "wine": load_wine,
        "iris": load_iris}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seeds", type=int, default=4)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{'data set':<14} {'features':<12} {'FedMPDD acc':>14} {'warned':>7} "
          f"{'cpu s':>6} {'MLPClassifier':>13}")
    for name, load in DATA.items():
        X, y = load(return_X_y=True)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
        for scaled in (False, True):
            accs, warned, cpu = [], 0, []
            for seed in range(args.seeds):
                net = FedMPDDClassifier(random_state=seed)
                model = make_pipeline(StandardScaler(), net) if scaled else net
                start = time.process_time()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", ConvergenceWarning)
                    model.fit(Xtr, ytr)
                cpu.append(time.process_time() - start)
                warned += any(issubclass(w.category, ConvergenceWarning) for w in caught)
                accs.append(100 * model.score(Xte, yte))
            mlp = MLPClassifier(random_state=0, max_iter=500)
            mlp = make_pipeline(StandardScaler(), mlp) if scaled else mlp
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                mlp.fit(Xtr, ytr)
            print(f"{name:<14} {'standardized' if scaled else 'raw':<12} "
                  f"{min(accs):>6.1f}-{max(accs):.1f}% {warned:>7} {np.median(cpu):>6.2f} "
                  f"{100 * mlp.score(Xte, yte):>12.1f}%")


if __name__ == "__main__":
    main()
