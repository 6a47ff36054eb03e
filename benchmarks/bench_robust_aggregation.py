"""How far one dishonest site moves FederatedRidge, with and without robust aggregation.

Eight honest sites (200 rows each, y = x . [1, 2, 3] + noise) and one attacker.
Prints max |coef - coef_honest| for each attack and each option of
:class:`sklearn_fed.linear_model.RobustAggregation` (server made with
``on_invalid="drop"``), and which sites were dropped.

    python benchmarks/bench_robust_aggregation.py
"""

import numpy as np

from sklearn_fed import ClientStatistics, FederatedRidge
from sklearn_fed.linear_model import RobustAggregation


def honest_sites(rng):
    sites = {}
    for k in range(8):
        X = rng.normal(size=(200, 3))
        sites[f"s{k}"] = (X, X @ [1.0, 2.0, 3.0] + rng.normal(size=200))
    return sites


def attacks(rng):
    X = rng.normal(size=(10**6, 3))
    yield "claims 1e6 rows of y = x.[-99.9, 0, 99.9]", (X, X @ [-99.9, 0.0, 99.9])
    X = rng.normal(size=(200, 3))
    yield (
        "features scaled by 1e4",
        (X * 1e4, X @ [1.0, 2.0, 3.0] + rng.normal(size=200)),
    )
    X = rng.normal(size=(2000, 3))
    yield "2,000 rows of y = x.[1.5, 2, 3] (subtle)", (X, X @ [1.5, 2.0, 3.0])


def serve(sites, robust):
    estimator = FederatedRidge()
    server = estimator.make_server(robust=robust, on_invalid="drop")
    tasks = server.next_tasks(list(sites))
    client = estimator.make_client()
    # the attacker sends its statistics whatever the declared bounds say
    replies = {}
    for site in tasks:
        replies[site] = (
            client.respond(tasks[site], *sites[site])
            if site != "evil"
            else (_dishonest_reply(server, tasks[site], *sites[site]))
        )
    server.receive(replies)
    return estimator.coef_, sorted(server.dropped_)


def _dishonest_reply(server, task, X, y):
    """A reply built by hand, as a dishonest site would: it skips the site's own checks."""
    from sklearn_fed.protocol import Frame, decode, encode
    from sklearn_fed.protocol._schema import reply_schema

    frame = decode(task)
    fields, arrays = ClientStatistics.from_data(X, y).to_payload()
    return encode(
        Frame(
            kind="ridge.statistics/reply",
            federation=frame.federation,
            round=frame.round,
            site=frame.site,
            schema=reply_schema(X, None, y),
            fields=fields,
            arrays=arrays,
        )
    )


def main():
    rng = np.random.default_rng(0)
    sites = honest_sites(rng)
    honest = (
        FederatedRidge()
        .fit_statistics({s: ClientStatistics.from_data(*d) for s, d in sites.items()})
        .coef_
    )
    options = {
        "none": None,
        "max_rows=10,000": RobustAggregation(max_rows=10_000),
        "feature_bound=10": RobustAggregation(feature_bound=10.0),
        "outlier_threshold=3.5": RobustAggregation(outlier_threshold=3.5),
        "all three": RobustAggregation(
            max_rows=10_000, feature_bound=10.0, outlier_threshold=3.5
        ),
    }
    print(f"{'attack':45s} | " + " | ".join(f"{name:>22s}" for name in options))
    print("-" * (48 + 25 * len(options)))
    for name, data in attacks(rng):
        cells = []
        for robust in options.values():
            coef, dropped = serve({**sites, "evil": data}, robust)
            cells.append(
                f"{np.abs(coef - honest).max():10.3g} {'(dropped)' if dropped else '':>11s}"
            )
        print(f"{name:45s} | " + " | ".join(f"{c:>22s}" for c in cells))


if __name__ == "__main__":
    main()
