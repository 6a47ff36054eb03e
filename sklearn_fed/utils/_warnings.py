"""Every warning of the package, reported at the user's line.

:func:`warn` issues a warning with the ``stacklevel`` of the first frame
outside the libraries: outside sklearn-fed, scikit-learn, the libraries that
call into them (joblib in ``GridSearchCV``, Dask's dispatch, skorch) and the
standard library's helpers on the way (``contextlib``, ``functools``,
``threading``, ``concurrent.futures``). So a warning points at the user's
``model.fit(X, y)``, ``pipe.fit(X, y)`` or ``search.fit(X, y)``, however deep
the fit runs. (Python 3.12's ``skip_file_prefixes`` does the same; this
package supports 3.11, so it walks the frames itself.)

A thread of a :class:`WarningThreadPool` (the simulated sites computing at
once) has no user frame: :func:`warn` keeps its warnings, and the thread
that shuts the pool down, the one running the user's ``fit``, issues them.

This module imports nothing from sklearn-fed, so every module may use it.
"""

import os
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

__all__ = ["WarningThreadPool", "warn"]

#: Packages (top-level modules) whose frames are not the user's.
_LIBRARIES = (
    "sklearn", "skorch", "joblib", "dask", "distributed", "threadpoolctl",
    # the standard library's helpers a call may pass through
    "contextlib", "functools", "threading", "concurrent",
)
#: This package's directory (sklearn_fed/), whatever it is installed as.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

_thread = threading.local()  # .pending: the warnings a pool's thread leaves to its caller


def warn(message, category=UserWarning):
    """Issue a warning at the user's line: the first frame outside the libraries.

    In a thread of a :class:`WarningThreadPool` the warning is kept, and
    issued by the thread that shuts the pool down. A thread with no user
    frame at all (one the libraries started) reports it at the line that
    called this function.

    Parameters
    ----------
    message : str
        The warning's text.
    category : type of Warning, default=UserWarning
        The warning's class.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn("a test warning")
    >>> caught[0].filename.startswith("<doctest")  # the caller's line, not this module's
    True
    """
    pending = getattr(_thread, "pending", None)
    if pending is not None:
        pending.append((message, category))
        return
    warnings.warn(message, category, stacklevel=_user_stacklevel())


def _user_stacklevel():
    """The ``stacklevel`` for :func:`warn`'s ``warnings.warn`` of the first frame outside
    the libraries (2, the caller of :func:`warn`, when every frame is a library's)."""
    prefixes = [_PACKAGE]  # the files (and folders) of the libraries imported by now
    for name in _LIBRARIES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path is None:
            continue
        if os.path.basename(path) == "__init__.py":
            path = os.path.dirname(path) + os.sep
        prefixes.append(path)
    frame, level = sys._getframe(2), 2  # frame 1 is warn, at stacklevel 1
    while frame is not None and frame.f_code.co_filename.startswith(tuple(prefixes)):
        frame, level = frame.f_back, level + 1
    return 2 if frame is None else level


class WarningThreadPool(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` whose threads' warnings its caller issues at the user's line.

    :func:`warn` in one of its threads keeps the warning; :meth:`shutdown`
    (``with pool:`` calls it on leaving), in the thread that waits for the
    pool, issues them all there, with that thread's user frame.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     with WarningThreadPool(2) as pool:
    ...         _ = list(pool.map(warn, ["from a thread"]))
    >>> str(caught[0].message), caught[0].filename.startswith("<doctest")
    ('from a thread', True)
    """

    def __init__(self, max_workers=None, thread_name_prefix="", initializer=None, initargs=()):
        self._pending = []
        super().__init__(max_workers, thread_name_prefix, initializer=_keep_warnings,
                         initargs=(self._pending, initializer, initargs))

    def shutdown(self, wait=True, *, cancel_futures=False):
        try:
            super().shutdown(wait=wait, cancel_futures=cancel_futures)
        finally:
            while self._pending:
                warn(*self._pending.pop(0))


def _keep_warnings(pending, initializer, initargs):
    _thread.pending = pending
    if initializer is not None:
        initializer(*initargs)
