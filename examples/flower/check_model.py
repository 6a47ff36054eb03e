"""Check the model the Flower run saved against the same fit in one process.

Usage: ``python check_model.py [SITES_DIRECTORY] [MODEL]`` (defaults ``sites``,
``model.skops``). The Flower run and ``FederatedRidgeCV().fit(X, y,
clients=...)`` on the same per-site rows must give identical coefficients.
"""

import json
import sys
import tomllib
from pathlib import Path

import numpy as np

from sklearn_fed.datasets import load_site_data
from sklearn_fed.flower import estimator_from_config, load_model


def main(directory="sites", model_path="model.skops"):
    here = Path(__file__).parent
    config = tomllib.loads((here / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    sites = sorted(json.loads((Path(directory) / "server-keys.json").read_text()))
    rows = [load_site_data(Path(directory) / f"{site}.csv", target="target") for site in sites]
    X = np.vstack([X.to_numpy() for X, _, _ in rows])
    y = np.concatenate([y for _, y, _ in rows])
    clients = np.repeat(sites, [len(y) for _, y, _ in rows])
    local = estimator_from_config(config).fit(X, y, clients=clients)
    flower = load_model(model_path)
    np.testing.assert_array_equal(flower.coef_, local.coef_)
    np.testing.assert_array_equal(flower.intercept_, local.intercept_)
    print(f"{type(flower).__name__} over {flower.clients_.tolist()}: alpha_={flower.alpha_:g}, "
          f"coefficients identical to the in-process fit")
    print(f"uplink {flower.communication_.uplink_bytes} bytes, "
          f"downlink {flower.communication_.downlink_bytes} bytes")


if __name__ == "__main__":
    main(*sys.argv[1:])
