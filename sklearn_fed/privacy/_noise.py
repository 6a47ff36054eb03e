"""Where privacy noise comes from, and the grid it is added on.

Two rules protect the noise:

* **Never reused, never predictable.** Every release of every site draws
  from its own stream (:func:`release_generator`). With ``random_state=None``
  the stream is seeded with 128 fresh bits from the operating system
  (:class:`numpy.random.SeedSequence` without entropy), so no seeding
  elsewhere in a program (``np.random.seed``) can reproduce it. An integer
  ``random_state`` derives a *different* stream for each release and site
  (``SeedSequence(random_state, spawn_key=(release, site))``): reproducible
  for tests, but anyone who knows the seed can subtract the noise.
* **No floating-point side channel.** Adding float noise to a float value
  leaks through the pattern of representable results (Mironov 2012; Jin et
  al. 2022 for Gaussian samplers). Here a site first rounds its exact
  statistics to a grid of spacing ``2^k`` (integers ``q``), then adds
  *integer* noise ``Z = round(N)``, ``N ~ N(0, s^2)``, and sends ``q + Z``:
  every integer is a possible output whatever the data, and ``q + round(N) =
  round(q + N)`` is post-processing of the continuous Gaussian mechanism on
  ``q``. Rounding the data to the grid moves ``q`` by up to 1/2 per value,
  so the sensitivity that is calibrated is ``Delta + 2^k sqrt(p)`` for ``p``
  released values (:func:`grid_exponent` keeps that excess below 2^-10 of
  ``Delta``).
"""

import hashlib
import math
from numbers import Integral

import numpy as np

from ..protocol import label_key

__all__ = ["discretized_sensitivity", "grid_exponent", "release_generator", "rounded_gaussian"]

# The grid spacing 2^k is chosen so that 2^k sqrt(p) <= 2^-NOISY_GRID_BITS * Delta
# when noise is added, and 2^k <= 2^-EXACT_GRID_BITS * Delta when it is not.
NOISY_GRID_BITS = 10
EXACT_GRID_BITS = 30


def _site_words(site):
    digest = hashlib.sha256(label_key(site).encode("utf-8")).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))


def release_generator(random_state, release, site):
    """The random generator of one site's noise in one release.

    Parameters
    ----------
    random_state : None, int or numpy.random.RandomState
        ``None``: 128 bits of fresh operating-system entropy (use this for
        privacy). An integer: a stream derived from it, the release number and
        the site, so two releases never share noise. A ``RandomState``: an
        integer drawn from it seeds the stream.
    release : int
        Number of the release (0, 1, ...).
    site : hashable
        The site's label.

    Returns
    -------
    numpy.random.Generator

    Examples
    --------
    >>> a = release_generator(0, 0, "a").standard_normal()
    >>> b = release_generator(0, 1, "a").standard_normal()
    >>> a == release_generator(0, 0, "a").standard_normal(), a == b
    (True, False)
    """
    if random_state is None:
        sequence = np.random.SeedSequence()
    else:
        if isinstance(random_state, np.random.RandomState):
            entropy = int(random_state.randint(np.iinfo(np.int64).max, dtype=np.int64))
        elif isinstance(random_state, Integral):
            entropy = int(random_state)
        else:
            raise ValueError(f"random_state must be None, an int or a RandomState; got "
                             f"{random_state!r}.")
        sequence = np.random.SeedSequence(entropy, spawn_key=(int(release), *_site_words(site)))
    return np.random.Generator(np.random.PCG64(sequence))


def grid_exponent(sensitivity, n_values, noisy):
    """``k`` of the grid ``2^k`` a release is rounded to (see the module docstring).

    Examples
    --------
    >>> grid_exponent(1.0, 16, noisy=True)
    -12
    """
    if noisy:
        return math.floor(math.log2(sensitivity / math.sqrt(n_values))) - NOISY_GRID_BITS
    return math.floor(math.log2(sensitivity)) - EXACT_GRID_BITS


def discretized_sensitivity(sensitivity, n_values, exponent):
    """L2 sensitivity of the values rounded to the grid ``2^exponent``: ``Delta + 2^k sqrt(p)``."""
    return sensitivity + math.ldexp(math.sqrt(n_values), exponent)


def rounded_gaussian(generator, std, size):
    """``round(N(0, std^2))`` as int64: integer noise for values on a grid (std in grid steps).

    Examples
    --------
    >>> rounded_gaussian(np.random.default_rng(0), 0.0, 3)
    array([0, 0, 0])
    """
    if std == 0:
        return np.zeros(size, dtype=np.int64)
    if not std < 2.0**56:
        raise OverflowError(f"noise std of {std:.3g} grid steps does not fit in 64 bits.")
    return np.rint(generator.standard_normal(size) * std).astype(np.int64)
