"""Where privacy noise comes from, and the grid it is added on.

Two rules protect the noise:

* **Never reused across different data, never predictable.** The noise of a
  release comes from its own stream (:func:`noise_generator`). With
  ``random_state=None`` the stream is seeded with 128 fresh bits from the
  operating system (:class:`numpy.random.SeedSequence` without entropy), so
  no seeding elsewhere in a program (``np.random.seed``) can reproduce it. An
  integer ``random_state`` is a *key*: the stream is seeded from a keyed
  BLAKE2b hash of the key, the site's label and the exact values the site
  releases (the statistics on the grid, before noise) with the release's
  calibration. Refitting the same rows gives the same release (the same
  model, as scikit-learn's ``check_fit_idempotent`` asks, and no more than
  the first release revealed); any change in the rows or the calibration
  gives a stream independent of the first, so two releases never share
  noise unless they are the same release. Anyone who knows the integer can
  recompute the noise of any candidate data set and test it against a
  release: an integer ``random_state`` is a secret or there is no privacy
  (see :doc:`/security`).
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

__all__ = ["discretized_sensitivity", "grid_exponent", "noise_generator", "rounded_gaussian"]

# The grid spacing 2^k is chosen so that 2^k sqrt(p) <= 2^-NOISY_GRID_BITS * Delta
# when noise is added, and 2^k <= 2^-EXACT_GRID_BITS * Delta when it is not.
NOISY_GRID_BITS = 10
EXACT_GRID_BITS = 30


def _key(random_state):
    """32 bytes from an int or RandomState ``random_state`` (the hash key of the noise)."""
    if isinstance(random_state, np.random.RandomState):
        entropy = int(random_state.randint(np.iinfo(np.int64).max, dtype=np.int64))
    elif isinstance(random_state, Integral) and not isinstance(random_state, bool) \
            and int(random_state) >= 0:
        entropy = int(random_state)
    else:
        raise ValueError(f"random_state must be None, a non-negative int or a RandomState; "
                         f"got {random_state!r}.")
    return hashlib.sha256(b"sklearn-fed noise key\0" + str(entropy).encode()).digest()


def noise_generator(random_state, site, *released):
    """The random generator of the noise a site adds to one release.

    Parameters
    ----------
    random_state : None, int or numpy.random.RandomState
        ``None``: 128 bits of fresh operating-system entropy (use this for
        privacy). An integer: a key; the stream is a keyed BLAKE2b hash of it,
        the site and ``released``, so the same release gets the same noise and
        any other release independent noise. A ``RandomState``: an integer
        drawn from it is the key.
    site : hashable
        The site's label.
    *released : bytes, str or ndarray
        What determines the release: the exact values before noise (e.g. the
        integers on the grid) and the calibration (noise scale, grid).

    Returns
    -------
    numpy.random.Generator

    Examples
    --------
    >>> import numpy as np
    >>> a = noise_generator(0, "a", np.array([3, 4]), "std=2").standard_normal()
    >>> b = noise_generator(0, "a", np.array([3, 5]), "std=2").standard_normal()
    >>> a == noise_generator(0, "a", np.array([3, 4]), "std=2").standard_normal(), a == b
    (True, False)
    """
    if random_state is None:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence()))
    digest = hashlib.blake2b(key=_key(random_state), digest_size=32,
                             person=b"sklearn-fed-dp")
    for part in (label_key(site), *released):
        if isinstance(part, np.ndarray):
            part = b"%s|%r|" % (part.dtype.str.encode(), part.shape) + \
                np.ascontiguousarray(part).tobytes()
        elif isinstance(part, str):
            part = part.encode("utf-8")
        # each part's length first: no two sequences of parts hash the same bytes
        digest.update(len(part).to_bytes(8, "little") + bytes(part))
    entropy = int.from_bytes(digest.digest(), "little")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))


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
    noise = generator.standard_normal(size)
    noise *= std
    return np.rint(noise, out=noise).astype(np.int64)
