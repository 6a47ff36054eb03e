"""A privacy budget that every private release of a fit, a pipeline or a search is charged to.

Every differentially private estimator of the package records its releases
in a :class:`~sklearn_fed.privacy.PrivacyLedger`. A
:class:`~sklearn_fed.pipeline.FederatedPipeline` composes its steps' ledgers
into one (``privacy_spent_``); a :class:`PrivacyBudget` given to it as
``privacy_budget`` is checked **before** any release (from what each step
will release) and charged after. The budget object is shared, not copied,
by :func:`sklearn.base.clone`, so a search over hyperparameters
(``GridSearchCV(pipeline)``, run with ``n_jobs=None``) charges every
candidate and every fold to the same budget and stops when it is spent.
"""

import math

from ._accounting import PrivacyLedger
from ._calibration import gaussian_noise_std

__all__ = ["PrivacyBudget", "PrivacySpentMixin", "as_budget", "planned_ledger", "planned_release", "release_parts",
           "spent_ledgers"]


class PrivacyBudget:
    """A total ``(epsilon, delta)`` that private fits are charged to, refusing to exceed it.

    Parameters
    ----------
    epsilon : float
        Total epsilon allowed, > 0.
    delta : float
        The delta at which the total is measured, in (0, 1).

    Attributes
    ----------
    ledger_ : PrivacyLedger
        Every release charged so far, composed.
    charges_ : list of (str, float)
        What was charged (a description) and the total epsilon after it.

    Examples
    --------
    >>> from sklearn_fed.privacy import PrivacyBudget, PrivacyLedger
    >>> budget = PrivacyBudget(epsilon=1.5, delta=1e-5)
    >>> release = PrivacyLedger()
    >>> release.record(3.73)   # about epsilon=1 at delta=1e-5
    >>> budget.charge(release, "first fit")
    >>> round(budget.spent()[0], 2)
    1.0
    >>> budget.charge(release, "second fit")
    >>> round(budget.spent()[0], 2)   # two releases compose to less than 2
    1.47
    >>> budget.charge(release, "third fit")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: privacy budget exceeded: third fit would bring the total to epsilon=1.8...
    """

    def __init__(self, epsilon, delta):
        if not (isinstance(epsilon, (int, float)) and 0 < epsilon < math.inf):
            raise ValueError(f"PrivacyBudget: epsilon must be positive and finite; got "
                             f"{epsilon!r}.")
        if not (isinstance(delta, (int, float)) and 0 < delta < 1):
            raise ValueError(f"PrivacyBudget: delta must be in (0, 1); got {delta!r}.")
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.ledger_ = PrivacyLedger()
        self.charges_ = []

    def __deepcopy__(self, memo):
        # clone() deep-copies parameters: a budget is shared by every clone of the
        # estimator it is given to (the fits of a search), never copied.
        return self

    def spent(self):
        """``(epsilon, delta)`` of everything charged so far."""
        return self.ledger_.epsilon(self.delta), self.delta

    def check(self, ledger, what):
        """Raise ValueError when charging ``ledger`` would exceed the budget; nothing changes."""
        total = self.ledger_.compose(ledger).epsilon(self.delta)
        if not total <= self.epsilon:
            raise ValueError(
                f"privacy budget exceeded: {what} would bring the total to "
                f"epsilon={total:.3g} at delta={self.delta:g}, over the budget's "
                f"epsilon={self.epsilon:g} (spent so far: {self.spent()[0]:.3g}). "
                "What you can do: lower the private steps' epsilon, release fewer "
                "statistics (fewer private steps or candidates), or give a larger budget."
            )
        return total

    def charge(self, ledger, what):
        """Add ``ledger``'s releases, after :meth:`check`."""
        total = self.check(ledger, what)
        self.ledger_ = self.ledger_.compose(ledger)
        self.charges_.append((str(what), total))

    def charge_site_release(self, fields, what):
        """Charge one private release a site answers, read from its task's ``fields``.

        A site's :class:`~sklearn_fed.protocol.SitePolicy` calls it (its
        ``privacy_budget``) for every task with an ``epsilon`` that it
        answers: the release is one Gaussian mechanism calibrated for the
        task's ``epsilon`` and ``delta`` (``calibration``, ``"analytic"`` if
        the task names none), or, for a task that is one of ``n_releases``
        (DP-FedAvg's rounds), one of that many releases sharing the
        ``(epsilon, delta)``. Raises ValueError, charging nothing, beyond the
        budget.

        Examples
        --------
        >>> site = PrivacyBudget(epsilon=1.5, delta=1e-5)
        >>> site.charge_site_release({"epsilon": 1.0, "delta": 1e-5}, "a release")
        >>> round(site.spent()[0], 2)
        1.0
        """
        epsilon, delta = fields.get("epsilon"), fields.get("delta")
        calibration = fields.get("calibration", "analytic")
        releases = fields.get("n_releases", 1)
        if not (isinstance(epsilon, float) and 0 < epsilon < math.inf
                and isinstance(delta, float) and 0 < delta < 1
                and calibration in ("analytic", "classic")
                and type(releases) is int and 1 <= releases <= 10**9):
            raise ValueError("the task's epsilon, delta, calibration or n_releases are not "
                             "those of a private release this site can account.")
        ledger = PrivacyLedger()
        ledger.record(math.sqrt(releases) * gaussian_noise_std(
            epsilon, delta, 1.0, calibration=calibration))
        self.charge(ledger, what)

    def __repr__(self):
        return f"PrivacyBudget(epsilon={self.epsilon!r}, delta={self.delta!r})"


def as_budget(budget):
    """A :class:`PrivacyBudget` from a ``privacy_budget`` parameter: None, a budget, or
    ``(epsilon, delta)``."""
    if budget is None or isinstance(budget, PrivacyBudget):
        return budget
    if isinstance(budget, tuple) and len(budget) == 2:
        return PrivacyBudget(*budget)
    raise ValueError(f"privacy_budget must be None, a PrivacyBudget or (epsilon, delta); "
                     f"got {budget!r}.")


def spent(ledger, delta):
    """``(epsilon, delta)`` of a composed ``ledger`` reported at ``delta`` (no release: 0;
    a release without noise, or a delta of 0: infinite epsilon)."""
    if len(ledger) == 0:
        return 0.0, delta
    return (ledger.epsilon(delta) if delta > 0 else math.inf), delta


class PrivacySpentMixin:
    """``privacy_spent_`` of an estimator whose fit composes its parts' releases (a pipeline,
    a search): read from the ``_privacy`` ledger and ``_privacy_delta`` its fit sets."""

    @property
    def privacy_spent_(self):
        """``(epsilon, delta)`` of every private release of every part, composed."""
        privacy = self.__dict__.get("_privacy")
        if privacy is None:
            raise AttributeError("privacy_spent_ is set by fit when a part is differentially "
                                 "private or privacy_budget is given.")
        return spent(privacy, self._privacy_delta)


def planned_release(estimator):
    """``(noise_multiplier, extra_delta)`` of one ``fit`` of a private estimator, or None.

    Read from its parameters before it runs (the multiplier of a Gaussian
    release calibrated for (epsilon, delta) does not depend on the
    sensitivity): an estimator defines ``_planned_release()``, or is
    private as :class:`~sklearn_fed.PrivateFederatedRidge` (one Gaussian
    release at its ``epsilon``, ``delta`` and ``calibration``).
    """
    plan = getattr(estimator, "_planned_release", None)
    if plan is not None:
        return plan()
    if isinstance(getattr(type(estimator), "privacy_spent_", None), property) and all(
            hasattr(estimator, name) for name in ("epsilon", "delta")):
        epsilon = estimator.epsilon
        if epsilon == math.inf:
            return 0.0, 0.0
        calibration = getattr(estimator, "calibration", "analytic")
        return gaussian_noise_std(epsilon, estimator.delta, 1.0, calibration=calibration), 0.0
    return None


def release_parts(name, estimator):
    """``[(name, part)]``: the parts of ``estimator`` that release statistics of rows.

    A pipeline's steps and a column transformer's transformers are searched
    (names joined by ``__``); ``"passthrough"``, ``"drop"``, ``None`` and
    what is not federated (a fitted passthrough runs at the site) release
    nothing.
    """
    if estimator is None or isinstance(estimator, str):
        return []
    steps = getattr(estimator, "steps", None)
    if isinstance(steps, list):
        return [part for step_name, step in steps
                for part in release_parts(f"{name}__{step_name}" if name else step_name, step)]
    parts = getattr(estimator, "transformers_", None) or getattr(estimator, "transformers", None)
    if isinstance(parts, list):
        return [part for entry in parts
                for part in release_parts(f"{name}__{entry[0]}" if name else entry[0], entry[1])]
    return [(name, estimator)] if hasattr(estimator, "make_server") else []


def planned_ledger(estimator):
    """The ledger of one ``fit`` of every part of ``estimator``, before it runs.

    A part without a private release (:func:`planned_release` is None)
    releases exact statistics: a release without noise (infinite epsilon).
    """
    ledger = PrivacyLedger()
    for _, part in release_parts("", estimator):
        plan = planned_release(part)
        multiplier, extra = (0.0, 0.0) if plan is None else plan
        ledger.record(multiplier, extra_delta=extra)
    return ledger


def spent_ledgers(estimator):
    """``({name: (ledger, delta)}, composed ledger)`` of a fitted ``estimator``'s parts.

    A part without a privacy ledger released exact statistics (infinite epsilon).
    """
    by_part, total = {}, PrivacyLedger()
    for name, part in release_parts("", estimator):
        ledger = part.__dict__.get("_privacy")
        if ledger is None:
            ledger = PrivacyLedger()
            ledger.record(0.0)  # exact statistics: no noise
            delta = 0.0
        else:
            delta = float(part.delta_)
        by_part[name] = (ledger, delta)
        total = total.compose(ledger)
    return by_part, total
