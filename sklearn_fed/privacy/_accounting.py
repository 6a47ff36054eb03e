"""Privacy spent by repeated Gaussian releases: one accountant for the whole package.

A Gaussian mechanism with noise multiplier ``m = sigma / sensitivity`` is
exactly ``mu``-Gaussian differentially private with ``mu = 1 / m``, and ``k``
adaptively composed Gaussian mechanisms are exactly
``sqrt(mu_1^2 + ... + mu_k^2)``-GDP (Dong, Roth & Su 2019, Cor. 2): the
composition *is* one Gaussian mechanism with multiplier
``(sum_i m_i^-2)^(-1/2)`` (``m / sqrt(k)`` for ``k`` equal multipliers). So a
ledger of full-batch releases needs two numbers, and its ``(epsilon, delta)``
is the analytic Gaussian curve of that one multiplier (``dp_accounting.
get_epsilon_gaussian``): exact, O(1) per release, and finite for any
multiplier (``epsilon=1e9`` allocates nothing).

Releases on a random subset of the clients (``sampling_probability < 1``,
as DP-FedAvg's client sampling) are not Gaussian after subsampling; those are
composed by the privacy-loss-distribution accountant of ``dp-accounting``,
grouped by ``(multiplier, probability)`` so that ``k`` equal releases cost one
self-composition, with a discretization interval that keeps the PLD's arrays
bounded whatever the multipliers.
"""

import math
from collections import Counter
from copy import deepcopy

import numpy as np

from ._dp import import_optional

__all__ = ["PrivacyLedger", "composed_noise_multiplier"]

# A PLD with more buckets than this is never built: the discretization
# interval grows instead (a coarser, still valid, upper bound on epsilon).
_MAX_PLD_BUCKETS = 200_000


def composed_noise_multiplier(noise_multipliers):
    """The one Gaussian multiplier that several full-batch Gaussian releases compose to.

    Parameters
    ----------
    noise_multipliers : iterable of float
        ``sigma / sensitivity`` of each release, >= 0 (0: no noise).

    Returns
    -------
    float
        ``(sum_i m_i^-2)^(-1/2)``; ``0.0`` when any release had no noise,
        ``inf`` for no release.

    Examples
    --------
    >>> composed_noise_multiplier([4.0] * 16)
    1.0
    """
    inverse_squares = 0.0
    for multiplier in noise_multipliers:
        if multiplier == 0:
            return 0.0
        inverse_squares += multiplier**-2
    return math.inf if inverse_squares == 0 else inverse_squares**-0.5


class PrivacyLedger:
    """Record Gaussian releases and report their composed ``(epsilon, delta)``.

    Each release is a Gaussian mechanism with *noise multiplier*
    ``sigma / sensitivity``, optionally run on a random subset of the
    clients. Full-batch releases compose in closed form (see the module
    docstring): ``record`` is O(1) and ``epsilon`` costs one call of the
    analytic Gaussian curve, however many releases there were. A release with
    no noise (multiplier 0) makes the total infinite. A release may also
    spend a fixed ``extra_delta`` (values released above a noisy threshold);
    ``epsilon(delta)`` is then that of the Gaussian releases at ``delta``
    minus the extra deltas.

    Examples
    --------
    >>> ledger = PrivacyLedger()
    >>> ledger.record(noise_multiplier=3.73)
    >>> one = ledger.epsilon(1e-5)
    >>> ledger.record(noise_multiplier=3.73, count=3)
    >>> len(ledger), ledger.noise_multiplier == 3.73 / 2
    (4, True)
    >>> ledger.epsilon(1e-5) > one
    True
    """

    def __init__(self):
        self._count = 0
        self._inverse_squares = 0.0  # sum of m^-2 over full-batch releases
        self._noiseless = False
        self._sampled = Counter()  # (multiplier, probability) -> count
        self._epsilons = {}  # delta -> epsilon of the releases recorded so far
        # delta spent outside the Gaussian curve (thresholded selection of released
        # values): it adds to the delta of every guarantee.
        self.extra_delta = 0.0

    def record(self, noise_multiplier, count=1, *, sampling_probability=1.0, extra_delta=0.0):
        """Add ``count`` Gaussian releases with this noise multiplier (0: no noise).

        Parameters
        ----------
        noise_multiplier : float
            ``sigma / sensitivity``, >= 0.
        count : int, default=1
            Number of such releases.
        sampling_probability : float, default=1.0
            Probability with which each record takes part in a release
            (Poisson subsampling); 1 for a release over every row.
        extra_delta : float, default=0.0
            Delta each release spends besides its Gaussian noise (a value
            released only above a noisy threshold); adds up.
        """
        if not 0 <= extra_delta < 1:
            raise ValueError(f"extra_delta must be in [0, 1); got {extra_delta!r}.")
        if not noise_multiplier >= 0:
            raise ValueError(f"noise_multiplier must be >= 0; got {noise_multiplier!r}.")
        if not (isinstance(count, (int, np.integer)) and count >= 0):
            raise ValueError(f"count must be a non-negative integer; got {count!r}.")
        if not 0 < sampling_probability <= 1:
            raise ValueError(
                f"sampling_probability must be in (0, 1]; got {sampling_probability!r}."
            )
        if count == 0:
            return
        self._epsilons = {}
        self._count += int(count)
        self.extra_delta += int(count) * float(extra_delta)
        if noise_multiplier == 0:
            self._noiseless = True
        elif sampling_probability == 1:
            self._inverse_squares += int(count) * float(noise_multiplier) ** -2
        else:
            self._sampled[(float(noise_multiplier), float(sampling_probability))] += int(count)

    @property
    def noise_multiplier(self):
        """Multiplier of the one Gaussian release the full-batch releases compose to."""
        if self._noiseless:
            return 0.0
        return math.inf if self._inverse_squares == 0 else self._inverse_squares**-0.5

    def epsilon(self, delta):
        """Composed epsilon of all releases at this ``delta``.

        Parameters
        ----------
        delta : float
            In (0, 1).

        Returns
        -------
        float
            ``0.0`` without releases, ``inf`` if one release had no noise.
        """
        if not 0 < delta < 1:
            raise ValueError(f"delta must be in (0, 1); got {delta!r}.")
        if self._count and not delta > self.extra_delta:
            return math.inf  # the selections alone spend this delta
        if delta not in self._epsilons:
            self._epsilons[delta] = self._epsilon(delta)
        return self._epsilons[delta]

    def _epsilon(self, delta):
        if self._count == 0:
            return 0.0
        delta = delta - self.extra_delta  # what the Gaussian releases may spend
        if self._noiseless:
            return math.inf
        dp_accounting = import_optional("dp_accounting", "dp-accounting", "dp")
        every = self._inverse_squares
        if self._sampled:
            try:
                return self._pld_epsilon(dp_accounting, delta)
            except (OverflowError, ValueError, MemoryError):
                # Multipliers so small that the PLD's range overflows: subsampling
                # never hurts, so the full-batch closed form is a valid upper bound.
                every += sum(k * m**-2 for (m, _), k in self._sampled.items())
        with np.errstate(divide="ignore", over="ignore"):
            return float(dp_accounting.get_epsilon_gaussian(every**-0.5, delta))

    def _pld_epsilon(self, dp_accounting, delta):
        events = [
            (dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(m)), k)
            for (m, q), k in sorted(self._sampled.items())
        ]
        if self._inverse_squares > 0:
            events.append((dp_accounting.GaussianDpEvent(self.noise_multiplier), 1))
        # The privacy loss of one Gaussian step spans about (1/m^2 + 1/m) * 10; keep
        # the composed distribution's range / interval under _MAX_PLD_BUCKETS.
        span = sum(k * (m**-2 + 10 / m) for (m, _), k in self._sampled.items())
        span += self._inverse_squares + 10 * math.sqrt(self._inverse_squares)
        interval = max(1e-3, span / _MAX_PLD_BUCKETS)
        accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=interval)
        for event, k in events:
            accountant.compose(event, k)
        return float(accountant.get_epsilon(delta))

    def __len__(self):
        return self._count

    def copy(self):
        """An independent copy (a release is recorded on a copy, then committed)."""
        return deepcopy(self)

    def compose(self, other):
        """A new ledger of this ledger's releases and ``other``'s (on the same rows).

        Examples
        --------
        >>> a, b = PrivacyLedger(), PrivacyLedger()
        >>> a.record(2.0); b.record(2.0)
        >>> round(a.compose(b).noise_multiplier, 6), len(a.compose(b))
        (1.414214, 2)
        """
        total = self.copy()
        total._epsilons = {}
        total._count += other._count
        total._inverse_squares += other._inverse_squares
        total._noiseless = total._noiseless or other._noiseless
        total._sampled.update(other._sampled)
        total.extra_delta += other.extra_delta
        return total
