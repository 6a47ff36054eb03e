"""Folds defined at the sites: each site splits its own rows, or whole sites are held out.

The server never sees rows, so it cannot split them: with :class:`SiteKFold`
every site splits its own rows with scikit-learn's :class:`~sklearn.model_selection.KFold`
(same ``n_splits``, ``shuffle`` and ``random_state`` everywhere), and fold ``k``
is the union of every site's ``k``-th test rows; with :class:`LeaveSitesOut`
the server assigns whole sites to folds, in sorted label order.
"""

import numbers

import numpy as np
from sklearn.model_selection import KFold

from ..protocol import sorted_labels

__all__ = ["LeaveSitesOut", "SiteKFold", "check_site_cv"]


class SiteKFold:
    """Each site splits its own rows into ``n_splits`` folds with scikit-learn's KFold.

    The pooled equivalent is a :class:`~sklearn.model_selection.PredefinedSplit`
    whose ``test_fold`` is, for every site, ``KFold(...).split`` of its rows
    (see :meth:`pooled_test_fold`).

    Parameters
    ----------
    n_splits : int, default=5
        At least 2; every site needs at least ``n_splits`` rows.
    shuffle : bool, default=False
    random_state : int, default=None
        With ``shuffle=True``, an int: every site draws with the same seed, so
        a run is reproducible (None would let each site draw differently).

    Examples
    --------
    >>> SiteKFold(3).pooled_test_fold(["a", "b", "a", "b", "a", "b"]).tolist()
    [0, 0, 1, 1, 2, 2]
    """

    def __init__(self, n_splits=5, *, shuffle=False, random_state=None):
        if not (isinstance(n_splits, numbers.Integral) and n_splits >= 2):
            raise ValueError(f"n_splits must be an int >= 2; got {n_splits!r}.")
        if shuffle and not isinstance(random_state, numbers.Integral):
            raise ValueError("SiteKFold(shuffle=True) needs an int random_state, so that every "
                             "site splits its rows reproducibly.")
        self.n_splits, self.shuffle, self.random_state = int(n_splits), shuffle, random_state

    def get_n_splits(self):
        return self.n_splits

    def site_folds(self, n_rows):
        """The fold of each of a site's ``n_rows`` rows (as KFold assigns its test rows)."""
        folds = np.empty(n_rows, dtype=np.intp)
        splitter = KFold(self.n_splits, shuffle=self.shuffle,
                         random_state=self.random_state if self.shuffle else None)
        for k, (_, test) in enumerate(splitter.split(np.empty((n_rows, 1)))):
            folds[test] = k
        return folds

    def pooled_test_fold(self, clients):
        """The ``test_fold`` of the equivalent PredefinedSplit on the pooled rows."""
        clients = np.asarray(clients, dtype=object)
        test_fold = np.empty(len(clients), dtype=np.intp)
        for label in sorted_labels(set(clients.tolist())):
            rows = np.flatnonzero(clients == label)
            test_fold[rows] = self.site_folds(len(rows))
        return test_fold

    def __repr__(self):
        return (f"SiteKFold(n_splits={self.n_splits}, shuffle={self.shuffle}, "
                f"random_state={self.random_state})")


class LeaveSitesOut:
    """Whole sites held out: site ``j`` (in sorted label order) is in fold ``j % n_splits``.

    ``n_splits=None``: one fold per site (leave one site out). The pooled
    equivalent is a PredefinedSplit on each row's site fold
    (:meth:`pooled_test_fold`).

    Examples
    --------
    >>> LeaveSitesOut(2).pooled_test_fold(["b", "a", "c", "a"]).tolist()
    [1, 0, 0, 0]
    """

    def __init__(self, n_splits=None):
        if not (n_splits is None or (isinstance(n_splits, numbers.Integral) and n_splits >= 2)):
            raise ValueError(f"n_splits must be None or an int >= 2; got {n_splits!r}.")
        self.n_splits = n_splits

    def get_n_splits(self, sites=None):
        if self.n_splits is not None:
            return self.n_splits
        if sites is None:
            raise ValueError("LeaveSitesOut(n_splits=None) has one fold per site.")
        return len(sites)

    def fold_of_sites(self, sites):
        """``{site: fold}`` of the given sites."""
        ordered = sorted_labels(sites)
        n_splits = self.get_n_splits(ordered)
        if len(ordered) < n_splits or len(ordered) < 2:
            raise ValueError(f"LeaveSitesOut needs at least {max(n_splits, 2)} sites; "
                             f"got {len(ordered)}.")
        return {site: j % n_splits for j, site in enumerate(ordered)}

    def pooled_test_fold(self, clients):
        clients = np.asarray(clients, dtype=object)
        folds = self.fold_of_sites(set(clients.tolist()))
        return np.array([folds[c] for c in clients.tolist()], dtype=np.intp)

    def __repr__(self):
        return f"LeaveSitesOut(n_splits={self.n_splits})"


def check_site_cv(cv):
    """``cv`` as a splitter: an int is :class:`SiteKFold` of that many folds, ``"sites"``
    :class:`LeaveSitesOut` with one fold per site (both can be written in a Flower run config)."""
    if isinstance(cv, (SiteKFold, LeaveSitesOut)):
        return cv
    if isinstance(cv, str) and cv == "sites":
        return LeaveSitesOut()
    if isinstance(cv, numbers.Integral) and not isinstance(cv, bool):
        return SiteKFold(int(cv))
    raise ValueError(
        f"cv must be an int, 'sites', SiteKFold or LeaveSitesOut (folds are defined at the sites, which "
        f"alone see their rows); got {cv!r}.")
