"""The site and server roles of :class:`~sklearn_fed.PrivateFederatedRidge`'s protocol.

A site derives its noise (:mod:`sklearn_fed.privacy._noise`) from the task's
epsilon, delta and bounds itself, so a server cannot ask for less noise than
the epsilon it announces; distributed noise is masked for secure aggregation
(:mod:`sklearn_fed.privacy._secure_aggregation`).
"""

import collections
import math

import numpy as np

from ..base import set_federation_attributes
from ..privacy import PrivacyLedger
from ..privacy._bounds import CLIPPED_SHARE_WARNING, ClippingWarning
from ..privacy._noise import noise_generator, rounded_gaussian
from ..privacy._secure_aggregation import (
    MaskingKey,
    check_public_keys,
    fixed_point_decode,
    fixed_point_encode,
    mask_vector,
    max_abs_encoded,
    unmask_sum,
)
from ..protocol import BlockwiseClient, Server, label_key, sorted_labels
from ..protocol._errors import failing
from ..protocol._fields import reply_error, server_error
from ..protocol._schema import count_rows
from ..utils._warnings import warn
from ._base import task_field, task_step
from ._private_release import ReleasePlan, clipped_sums, n_released
from ._robust import refuse_copies

__all__ = ["PrivateClient", "PrivateServer"]

_STEPS = ("keys", "release")


#: The parameters of a release every task carries, and their types (the others are the
#: estimator's parameters of the same names).
_PRIVACY_FIELDS = {
    "release": int, "n_sites": int, "fit_intercept": bool, "feature_bound": float,
    "target_bound": float, "epsilon": float, "delta": float, "calibration": str, "noise": str,
}


def _privacy_fields(estimator, release, n_sites):
    given = {"release": release, "n_sites": n_sites}
    return {name: kind(given[name] if name in given else getattr(estimator, name))
            for name, kind in _PRIVACY_FIELDS.items()}


class PrivateClient(BlockwiseClient):
    """A site of :class:`PrivateFederatedRidge`.

    A ``"keys"`` task (distributed noise) asks for a fresh X25519 public key;
    a ``"release"`` task has the site clip its rows, compute its sums, round
    them to the grid, add integer Gaussian noise from a fresh stream, mask
    them when the task lists the other sites' public keys, and reply. The
    site warns (:class:`~sklearn_fed.privacy.ClippingWarning`) when clipping
    changes more than 10% of its rows.

    Attributes
    ----------
    clipped_ : dict
        ``label_key(site) -> (site, rows clipped, rows)`` of its last release
        (a site-local diagnostic; it is never sent).
    """

    protocol = "ridge.private"

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        self.clipped_ = {}
        self._masking_keys = {}  # (federation, site) -> MaskingKey, until it masks
        self._pair_keys = {}  # pair keys shared by the sites this process runs

    def respond(self, task, X, y=None, sample_weight=None):
        self.clipped_.clear()
        reply = super().respond(task, X, y, sample_weight)
        for site, n_clipped, n_rows in self.clipped_.values():
            _warn_if_clipped(n_clipped, n_rows, f"site {site!r}")
        return reply

    def replies_are_independent(self, tasks):
        # A local-noise release draws from its site's own stream and touches no
        # shared state; key rounds and masking share this process's keys.
        return all(task.fields.get("step") == "release" and task.fields.get("noise") == "local"
                   for task in tasks.values())

    # A release is _finish (grid, noise, mask: once per site) of the sum of the
    # clipped sums of the site's rows, so its rows may come in blocks.
    def reads_rows(self, task):
        return task_step(task, _STEPS) != "keys"

    def summarize(self, task, X, y, sample_weight, rows):
        if task_step(task, _STEPS) == "keys":
            return None  # a key depends on no row
        fields = _read_privacy_fields(task)
        sums, n_clipped = clipped_sums(
            X, y, sample_weight, rows, fields["feature_bound"], fields["target_bound"],
            fields["fit_intercept"],
        )
        return ClippedSums(sums, n_clipped, count_rows(X.shape[0], rows), y.ndim == 1)

    def merge(self, first, second):  # (a key round's summary is None)
        return None if first is None else ClippedSums(
            *(a + b for a, b in zip(first[:3], second[:3])), first.single_target)

    def finish(self, task, summary):
        if task_step(task, _STEPS) == "keys":
            key = MaskingKey()  # always fresh OS randomness: the server must never know it
            self._masking_keys[(task.federation, label_key(task.site))] = key
            return {}, {"public_key": np.frombuffer(key.public_bytes, dtype=np.uint8)}
        fields = _read_privacy_fields(task)
        p = summary.sums.shape[0]
        public_keys, index = None, None
        if fields["noise"] == "distributed":
            public_keys = check_public_keys(task.arrays.get("public_keys"), fields["n_sites"])
            index = task_field(task, "index", int)
            if not 0 <= index < fields["n_sites"]:
                server_error("site index out of range.")
        plan = ReleasePlan(fields, n_values=p,
                           n_sharing=1 if public_keys is None else fields["n_sites"])
        self.clipped_[label_key(task.site)] = (task.site, summary.n_clipped, summary.n_rows)
        # Each site's |sums + noise| <= floor((2^63-1)/K) grid steps: K of them cannot overflow.
        encoded = fixed_point_encode(summary.sums, plan.exponent, fields["n_sites"],
                                     party=task.site)
        # the noise is keyed by what is released (the sums on the grid and every parameter
        # of the release but its number): a refit of the same rows is the same release
        calibration = repr(sorted((k, v) for k, v in fields.items() if k != "release"))
        generator = noise_generator(self.estimator.random_state, task.site, "private-ridge",
                                    calibration, repr((plan.site_std, plan.exponent)),
                                    encoded)
        noise = rounded_gaussian(generator, math.ldexp(plan.site_std, -plan.exponent), p)
        encoded = encoded + noise
        limit = max_abs_encoded(fields["n_sites"])
        if np.any(np.abs(encoded) > limit):
            raise OverflowError(
                f"site {task.site!r}: its noisy sums exceed the {limit} grid steps that "
                f"{fields['n_sites']} sites can add without overflow in 64-bit fixed point.")
        reply_fields = {"single_target": summary.single_target}
        if public_keys is None:
            return reply_fields, {"sums": encoded}
        key = self._masking_keys.pop((task.federation, label_key(task.site)), None)
        if key is None:
            server_error("a masked release without this site's key round.")
        local = {other.public_bytes for (federation, _), other in self._masking_keys.items()
                 if federation == task.federation}
        context = f"{task.federation}|{task.round}".encode("ascii")  # what the masks bind to
        masked = mask_vector(encoded, key, index, public_keys, context,
                             pair_keys=self._pair_keys, local_publics=local)
        if not local:
            self._pair_keys.clear()  # the last site of this process has masked
        return reply_fields, {"masked": masked}


#: A block of a site's rows for a release: its clipped sums (before grid and noise), the
#: rows clipping changed, its rows, and whether ``y`` is one-dimensional.
ClippedSums = collections.namedtuple("ClippedSums", "sums n_clipped n_rows single_target")


def _read_privacy_fields(task):
    """The release's parameters, checked at the site (tasks are untrusted)."""
    fields = {name: task_field(task, name, kind) for name, kind in _PRIVACY_FIELDS.items()}
    valid = (
        fields["release"] >= 0
        and 1 <= fields["n_sites"] <= 2**31
        and all(0 < fields[k] < math.inf for k in ("feature_bound", "target_bound"))
        and fields["epsilon"] > 0
        and 0 < fields["delta"] < 1
        and fields["calibration"] in ("analytic", "classic")
        and fields["noise"] in ("local", "distributed")
    )
    if not valid:
        server_error(f"malformed private release task {fields}.")
    return fields


def _warn_if_clipped(n_clipped, n_rows, where):
    """The share of ``n_rows`` rows that clipping changed; a ClippingWarning above 10%."""
    share = n_clipped / n_rows if n_rows else 0.0
    if share > CLIPPED_SHARE_WARNING:
        warn(f"Clipping to feature_bound/target_bound changed {share:.0%} of the rows of "
             f"{where}: the model is fitted to clipped values. State bounds that contain the "
             "data, e.g. scale features from known ranges with "
             "sklearn_fed.privacy.RangeScaler (then feature_bound=1) and set target_bound "
             "to the known range of y.", ClippingWarning)
    return share


class PrivateServer(Server):
    """Server of :class:`PrivateFederatedRidge`.

    Local noise: one round of noisy sums. Distributed noise: a key round,
    then a round of masked sums that must include every site that received
    the keys (a site lost in between fails the round cleanly; the next call
    to :meth:`next_tasks` starts again with new keys among the reachable sites).
    """

    protocol = "ridge.private"

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        privacy = getattr(estimator, "_privacy", None)
        # Every release of this estimator is counted, refits by fit included.
        self.release = 0 if privacy is None else len(privacy)
        self._public_keys = None  # site key -> (site, public key), distributed mode
        self._masked_sites = None  # the sites of the open masked round
        self._stage = None  # "keys" or "release": what the open round asks for
        self._done = False

    def plan(self, sites):
        if self._done:
            return {}
        estimator = self.estimator
        fields = _privacy_fields(estimator, self.release, len(sites))
        self._stage = "release"
        if estimator.noise == "local":
            return {site: ({"step": "release", **fields}, {}) for site in sites}
        reachable = {label_key(site) for site in sites}
        if self._public_keys is None or not set(self._public_keys) <= reachable:
            # (re)start: new keys among the reachable sites
            self._public_keys, self._masked_sites, self._stage = None, None, "keys"
            return {site: ({"step": "keys", **fields}, {}) for site in sites}
        order = sorted_labels(site for site, _ in self._public_keys.values())
        table = np.array([self._public_keys[label_key(site)][1] for site in order])
        self._masked_sites = order
        fields = _privacy_fields(estimator, self.release, len(order))
        return {
            site: ({"step": "release", "index": index, **fields}, {"public_keys": table})
            for index, site in enumerate(order)
        }

    def read_reply(self, site, frame):
        fail = failing(site)
        if self._stage == "keys":
            key = frame.arrays.get("public_key")
            if frame.fields or set(frame.arrays) != {"public_key"} or not (
                isinstance(key, np.ndarray) and key.dtype == np.uint8 and key.shape == (32,)
            ):
                fail("a key reply must be one 32-byte uint8 public key.")
            return key.copy()
        if set(frame.fields) != {"single_target"} or type(
                frame.fields["single_target"]) is not bool:
            fail("a release must say (only) whether y was one-dimensional.")
        n_targets = frame.schema.get("n_targets")
        if not (type(n_targets) is int and n_targets > 0) or (
                frame.fields["single_target"] and n_targets != 1):
            fail(f"the reply's number of targets {n_targets!r} is not valid.")
        local = self.estimator.noise == "local"
        name, dtype = ("sums", np.int64) if local else ("masked", np.uint64)
        p = n_released(frame.schema["n_features"], n_targets, self.estimator.fit_intercept)
        vector = frame.arrays.get(name)
        if set(frame.arrays) != {name} or not (
            isinstance(vector, np.ndarray) and vector.dtype == dtype and vector.shape == (p,)
        ):
            fail(f"a {self.estimator.noise} release must be one {np.dtype(dtype).name} vector "
                 f"{name!r} of length {p}.")
        if local and np.any(np.abs(vector) > max_abs_encoded(len(self.open_sites))):
            fail(f"its sums exceed the fixed-point range of {len(self.open_sites)} sites.")
        return frame.fields["single_target"], n_targets, vector

    def cross_check(self, replies):
        """The same vector (or public key) under two sites is a replay: refuse the second."""
        stage = self._stage
        return refuse_copies(
            replies, lambda reply: (reply if stage == "keys" else reply[2]).tobytes(),
            lambda first: f"sent the same {stage} as site {first!r} (replayed).")

    def apply(self, replies, ledger):
        if self._stage == "keys":
            self._public_keys = {
                label_key(site): (site, replies[site]) for site in sorted_labels(replies)
            }
            return
        estimator = self.estimator
        d = self.schema.n_features
        order = sorted_labels(replies)
        single_target, t, first = replies[order[0]]
        if any(replies[site][0] != single_target for site in order):
            reply_error(order[-1], "the sites disagree on whether y is one-dimensional.")
        p = first.shape[0]
        n_sharing = 1 if self._masked_sites is None else len(self._masked_sites)
        plan = ReleasePlan(_privacy_fields(estimator, self.release, n_sharing), n_values=p,
                           n_sharing=n_sharing)
        vectors = {site: replies[site][2] for site in order}
        if self._masked_sites is None:
            total = np.sum([vectors[site] for site in order], axis=0, dtype=np.int64)
        else:
            masked, self._masked_sites = self._masked_sites, None
            self._public_keys = None  # keys are used for one masked round only
            total = unmask_sum(vectors, p, parties=masked)
        released = fixed_point_decode(total, plan.exponent)
        previous = getattr(estimator, "_noisy_sums", None) if self.warm_start else None
        if previous is not None:
            released = released + previous
            single_target = estimator._single_target
        alpha = estimator._checked_alpha(t)
        coef, summary = estimator._solve(released, d, t, alpha, single_target, plan)
        privacy = PrivacyLedger() if getattr(estimator, "_privacy", None) is None else (
            estimator._privacy.copy())
        privacy.record(plan.noise_multiplier)
        ledger.n_parameters = estimator._n_parameters(d, t)
        earlier = () if previous is None else estimator.clients_
        # commit: nothing above touched the estimator
        estimator._noisy_sums = released
        estimator._n_targets = t
        estimator._fit_intercept = estimator.fit_intercept
        estimator._single_target = single_target
        estimator._privacy = privacy
        estimator.epsilon_ = float(estimator.epsilon)
        estimator.delta_ = float(estimator.delta)
        estimator.sensitivity_ = plan.sensitivity
        estimator.noise_std_ = plan.noise_std
        estimator.n_releases_ = len(privacy)
        set_federation_attributes(estimator, self.schema, ledger, replies, previous_clients=earlier,
                                  n_features=d)
        estimator._set_coef(summary, coef, self.round_dtype.type)
        self._done = True
