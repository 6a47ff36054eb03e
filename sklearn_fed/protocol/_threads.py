"""Simulated sites on threads: the settings they must see, and when threads pay.

A simulated run's settings are thread-local: :func:`simulate_through_bytes`
(messages as bytes), scikit-learn's ``config_context`` and numpy's
``errstate``. :func:`site_threads` makes a pool whose threads adopt the
caller's; :func:`blas_threads` and :data:`MIN_VALUES_PER_THREAD` decide
whether sites computing at once pays. Both the roles
(:meth:`Client.reply_many <sklearn_fed.protocol.Client.reply_many>`) and the
run loop (:mod:`sklearn_fed.protocol._simulate`) use them, so they live
below both.
"""

import contextlib
import functools
import threading

import numpy as np

from ..utils._warnings import WarningThreadPool

__all__ = [
    "MIN_ROWS_PER_THREAD",
    "MIN_VALUES_PER_THREAD",
    "blas_libraries",
    "blas_threads",
    "simulate_through_bytes",
    "site_threads",
    "through_bytes",
]

_config = threading.local()


@contextlib.contextmanager
def simulate_through_bytes(enabled=True):
    """Within this block, every simulated message is serialized and parsed.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import FederatedRidge
    >>> X, y = np.arange(12.0).reshape(6, 2), np.arange(6.0)
    >>> with simulate_through_bytes():
    ...     model = FederatedRidge().fit(X, y, clients=[0, 0, 1, 1, 2, 2])
    >>> model.n_clients_
    3
    """
    previous = getattr(_config, "through_bytes", False)
    _config.through_bytes = enabled
    try:
        yield
    finally:
        _config.through_bytes = previous


def through_bytes():
    """Whether messages are serialized (inside :func:`simulate_through_bytes`)."""
    return getattr(_config, "through_bytes", False)


def site_threads(workers):
    """A pool of ``workers`` threads that see this thread's settings.

    The settings a site's computation reads are thread-local and a new
    thread would start from the defaults: :func:`simulate_through_bytes`,
    scikit-learn's ``config_context`` and numpy's ``errstate``. A site's
    warning is issued by this thread when the pool shuts down (a thread has
    no user frame to report it at).
    """
    from sklearn import get_config

    return WarningThreadPool(workers, initializer=_adopt_settings,
                             initargs=(through_bytes(), get_config(), np.geterr()))


def _adopt_settings(messages_as_bytes, sklearn_config, numpy_errors):
    from sklearn import set_config

    _config.through_bytes = messages_as_bytes
    set_config(**sklearn_config)
    np.seterr(**numpy_errors)


#: Rows worth a thread of their own: a pooled reply is computed in parts of at
#: least this many rows (fewer cost more in thread handoffs than they save).
MIN_ROWS_PER_THREAD = 1 << 14
#: Sites answer on parallel threads only with this many values (rows x
#: features) per thread: as many as MIN_ROWS_PER_THREAD rows of 100 features,
#: fewer rows when they are wider (more work each: FederatedRidgeCV's 50 sites
#: of 400 x 500 take 0.69x the time on two threads).
MIN_VALUES_PER_THREAD = 100 * MIN_ROWS_PER_THREAD


@functools.lru_cache(maxsize=1)
def blas_libraries():
    """threadpoolctl's controller of the BLAS libraries (finding them takes ms: once)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas")


def blas_threads():
    """The most threads any loaded BLAS library may use now."""
    return max((lib.get_num_threads() for lib in blas_libraries().lib_controllers), default=1)
