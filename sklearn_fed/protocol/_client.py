"""A site's role in every protocol: :class:`Client` and :class:`BlockwiseClient`.

The contract of both roles (and the :class:`~sklearn_fed.protocol.Server`'s)
is in ``sklearn_fed/protocol/_roles.py`` and :doc:`/developers`. A site
decodes and authenticates its task, checks it against its
:class:`~sklearn_fed.protocol.SitePolicy`, checks its own rows
(:meth:`Client.check_rows`), computes its answer (:meth:`Client.compute`),
screens it by its disclosure rules and encodes it.
"""

from abc import ABC, abstractmethod

from ._disclosure import screen_reply
from ._errors import InvalidClientMessage, TaskRefused
from ._policy import SitePolicy, current_simulated_policy
from ._schema import (
    FeatureSchema,
    check_site_data,
    count_rows,
    reply_schema,
    unnamed_columns_message,
)
from ._threads import MIN_VALUES_PER_THREAD, blas_libraries, blas_threads, site_threads
from ._wire import (
    Frame,
    _as_key,
    decode,
    encode,
    label_key,
)

__all__ = ["BlockwiseClient", "Client"]


class Client(ABC):
    """A site: answers the server's tasks from its own rows, and nothing else.

    Parameters
    ----------
    estimator : estimator
        Supplies the code and configuration a site needs (e.g. a network's
        architecture); the task supplies everything decided by the server.
    key : bytes or str, default=None
        Shared key of this site (at least 16 bytes): tasks must be signed
        with it, and replies are.
    policy : SitePolicy, default=None
        What the site refuses and releases; ``None``: ``SitePolicy()`` in :meth:`respond`.
    site : hashable, default=None
        This site's label; when set, a task addressed to another site is refused.
    """

    #: Name of the protocol; tasks are ``"<protocol>/task"``, replies ``"<protocol>/reply"``.
    protocol = None
    accept_sparse = True
    needs_y = True
    #: Whether ``y`` must be numeric (regression) or may hold class labels.
    y_numeric = True
    #: Whether a reply may come from no new rows (a streaming site that holds earlier ones).
    accepts_no_rows = False
    #: For a role that does not need targets: False when its replies never describe any
    #: (``check_rows`` leaves ``y`` out), None when the caller decides (a composite hands
    #: ``y`` on to its parts). The server refuses a reply that contradicts it, naming the
    #: site, without any declaration.
    targets_in_reply = None
    #: What a reply is made of, for the site's disclosure rules (``CountedValues``,
    #: ``CountedColumns``, ``ColumnExtremes``; see :doc:`/disclosure`).
    disclosure = ()

    def __init__(self, estimator, *, key=None, policy=None, site=None):
        self.estimator = estimator
        self.key = _as_key(key)
        self.policy = policy
        self.site = site

    def respond(self, task, X, y=None, sample_weight=None):
        """Answer one task (bytes) from this site's rows; returns the reply's bytes.

        Parameters
        ----------
        task : bytes
            As produced by :meth:`Server.next_tasks` for this site.
        X : array-like, sparse matrix or DataFrame of shape (n_samples, n_features)
            This site's rows (for streaming protocols: this round's new rows).
            DataFrame columns are matched to the task's features by name.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        reply : bytes

        Raises
        ------
        InvalidClientMessage
            The task is not authentic or not well formed.
        TaskRefused
            The site's policy forbids the task.
        ValueError
            The site's rows are unusable (named columns missing, NaN, ...).
        """
        try:
            frame = decode(task, key=self.key, client="server")
        except InvalidClientMessage as exc:
            raise InvalidClientMessage(self._unreadable_task(exc), "server") from exc
        # A deployed site applies its policy, the DataSHIELD-like defaults when given none.
        policy = SitePolicy() if self.policy is None else self.policy
        self._in_force = policy  # what a composite's parts apply (see policy_in_force)
        try:
            return encode(self.checked_reply(frame, X, y, sample_weight, policy,
                                             columns_in_order=policy.columns_in_order),
                          key=self.key)
        finally:
            del self._in_force

    def _unreadable_task(self, exc):
        """Why this site cannot read a task, said from the site's side: what to check."""
        reason = str(exc).removeprefix("client 'server': ")
        site = "this site" if self.site is None else f"site {self.site!r}"
        if self.key is None and "no key is configured" in reason:
            advice = (f"the server signs {site}'s tasks with a key, and {site} has none: give "
                      "it the key the server's keys file holds for it (on Flower: the node "
                      "config's key-file).")
        elif self.key is not None and "authentication failed" in reason:
            advice = (f"the task does not verify under {site}'s key: the server's keys file "
                      f"holds another key for {site} (compare the two; on Flower: the run "
                      "config's keys-file and this node's key-file), or the task was altered "
                      "on its way.")
        elif self.key is not None and "not authenticated" in reason:
            advice = (f"the task is not signed, but {site} has a key: the server has no key "
                      f"for {site} (on Flower: add it to the run config's keys-file).")
        else:
            advice = reason
        return f"{site} cannot read the server's task: {advice}"

    def checked_reply(self, task, X, y, sample_weight, policy, *, columns_in_order=True):
        """The reply frame to a decoded task, once the task, the rows and ``policy`` (None:
        nothing held back) allow it; a composite's part answers its nested task with it.
        ``columns_in_order=False`` refuses rows without column names for a task that names
        its features."""
        self.check_task(task)
        try:
            schema = FeatureSchema.from_json(task.schema)
        except ValueError as exc:
            raise InvalidClientMessage(f"server: {exc}", "server") from exc
        if self.needs_y and y is None:
            raise ValueError(f"site {task.site!r}: this task needs targets y.")
        if schema.feature_names is not None and not hasattr(X, "columns") and not columns_in_order:
            raise ValueError(unnamed_columns_message(schema, task.site))
        X, y, sample_weight, names = self.check_rows(X, y, sample_weight, schema, task.site)
        if policy is not None:
            policy.check_task(self.protocol, task, schema, X.shape[0], task.site)
        return self.screened_reply(policy, task, X, y, sample_weight, None, names)

    def policy_in_force(self):
        """The policy replies are screened with now (None: nothing held back): in :meth:`respond`
        the site's (``SitePolicy()`` if none); in ``fit``'s simulation its own or
        :func:`~sklearn_fed.protocol.simulated_policy`'s."""
        in_force = self.__dict__.get("_in_force")
        if in_force is not None:
            return in_force
        return self.policy if self.policy is not None else current_simulated_policy()

    def check_rows(self, X, y, sample_weight, schema, site):
        """Validate this site's rows against the task's schema, before anything is computed.

        Numeric, finite rows by default (:func:`check_site_data`); roles of
        estimators that take categories or missing values override it. A
        role that does not need targets (``needs_y = False``) ignores ``y``.
        Returns ``(X, y, sample_weight, names)``.
        """
        if not self.needs_y:
            y = None  # an unsupervised reply describes no targets, whatever the caller passed
        return check_site_data(
            X, y, sample_weight, schema=schema, site=site,
            accept_sparse=self.accept_sparse, y_numeric=self.y_numeric,
            ensure_min_samples=0 if self.accepts_no_rows else 1,
        )

    def check_task(self, task):
        if task.kind != f"{self.protocol}/task":
            raise InvalidClientMessage(
                f"server: expected a {self.protocol!r} task, got {task.kind!r}.", "server"
            )
        if self.site is not None and label_key(task.site) != label_key(self.site):
            raise TaskRefused(
                f"site {self.site!r} received a task addressed to site {task.site!r}.", self.site
            )

    def reply(self, task, X, y, sample_weight, rows, names):
        """Build the reply frame; ``rows`` selects this site's rows of a shared ``X``."""
        return self.screened_reply(self.policy_in_force(), task, X, y, sample_weight, rows,
                                   names)

    def screened_reply(self, policy, task, X, y, sample_weight, rows, names):
        """The reply frame, with ``policy``'s disclosure rules applied before it leaves."""
        frame = self.reply_frame(task, X, y, names, *self.compute(task, X, y, sample_weight, rows))
        return self.screen(policy, task, frame, X, rows)

    def screen(self, policy, task, frame, X, rows):
        """``frame`` with ``policy``'s disclosure rules and this role's :attr:`disclosure`
        applied (policy-only arrays removed); for a :meth:`reply_many` that builds frames
        itself."""
        if policy is None and not self.disclosure:
            return frame
        return screen_reply(self, policy, task, frame, X, rows, count_rows(X.shape[0], rows))

    def released_parameters(self, task, frame):
        """Model parameters the reply fits (the policy's parameters-per-row rule): by default
        ``(n_features + 1) * n_targets`` when supervised (a model fit), else None."""
        schema = frame.schema or {}
        return (int(schema.get("n_features", 0)) + 1) * max(
            1, int(schema.get("n_targets", 1))) if self.needs_y else None

    @classmethod
    def answers_from_blocks(cls):
        """Whether this role's reply is ``finish`` of its merged ``summarize`` (a
        :class:`BlockwiseClient` whose ``compute`` is not replaced), so its rows may be
        summarized in blocks."""
        owner = next(base for base in cls.__mro__ if "compute" in base.__dict__)
        return owner is BlockwiseClient

    def reads_rows(self, task):
        """Whether the answer to ``task`` depends on the rows at all (a key exchange does not)."""
        return True

    def reply_frame(self, task, X, y, names, fields, arrays):
        """The reply frame to ``task`` carrying ``fields`` and ``arrays``."""
        return Frame(
            kind=f"{self.protocol}/reply",
            federation=task.federation,
            round=task.round,
            site=task.site,
            schema=reply_schema(
                X, names, y, send_names=(task.schema or {}).get("feature_names") is None
            ),
            fields=fields,
            arrays=arrays,
        )

    @abstractmethod
    def compute(self, task, X, y, sample_weight, rows):
        """A site's answer to a task, from its own rows.

        Parameters
        ----------
        task : Frame
            The decoded, authentic task (``task.fields``, ``task.arrays``:
            untrusted values from the server; check what you read, e.g. with
            :func:`~sklearn_fed.linear_model._base.task_field`).
        X, y, sample_weight : arrays
            Rows already checked by :meth:`check_rows` against the task's schema.
        rows : slice, ndarray or None
            The site's rows of ``X`` (the simulation shares one ``X`` among
            sites); None: all of ``X``.

        Returns
        -------
        fields, arrays : dict, dict
            The reply's JSON-able fields and numpy arrays.
        """

    # ------------------------------------------------ speed-ups (optional)
    def fields_of_rows(self, fields, n_rows):
        """For a pooled round (see :meth:`Server.pools_round`): the fields of the reply
        of a site with ``n_rows`` rows of unit weight, from the pooled reply's ``fields``;
        None (the default) when this role cannot tell, and the round runs site by site."""
        return

    def reply_many(self, tasks, X, y, sample_weight, rows, names):
        """Replies of many simulated sites that share one ``X``: ``{site: frame}``.

        ``rows[site]`` selects each site's rows. The simulation calls this
        once per round; a family may override it to compute its sites
        together (one batched product for many sites) provided every frame
        is exactly the one :meth:`reply` would build for that site alone.
        """
        def reply(site):
            return self.reply(tasks[site], X, y, sample_weight, rows[site], names)

        sites = list(tasks)
        workers = self.site_workers(tasks, X, rows)
        if workers > 1:
            # As real sites do, they compute at once: each on one BLAS thread,
            # as many at a time as BLAS had threads (GIL released in BLAS and numpy).
            with blas_libraries().limit(limits=1), site_threads(workers) as pool:
                return dict(zip(sites, pool.map(reply, sites)))
        return {site: reply(site) for site in sites}

    def site_workers(self, tasks, X, rows):
        """How many of these simulated sites may compute their replies at once (1: in turn).

        As many as BLAS has threads, when :meth:`replies_are_independent`
        and the sites hold enough values (rows x features) for threads to pay.
        """
        workers = min(len(tasks), blas_threads())
        if workers > 1 and self.replies_are_independent(tasks) and (
            sum(count_rows(X.shape[0], rows[site]) for site in tasks) * X.shape[1]
            >= workers * MIN_VALUES_PER_THREAD  # else threads cost more than they save
        ):
            return workers
        return 1

    def replies_are_independent(self, tasks):
        """Whether :meth:`reply_many` may compute these sites' replies on parallel threads.

        True only for a role whose reply to a site reads nothing but its task
        and rows and changes no state another site's reply reads (a pure
        function of them). Default False: sites answer one after another.
        """
        return False


class BlockwiseClient(Client):
    """A site whose answer is a reduction over its rows, so it can come in blocks.

    ``compute`` is ``finish`` of the ``merge`` of the ``summarize`` of
    the site's rows; a site whose rows are split in blocks (Dask partitions,
    see :mod:`sklearn_fed.dask`) summarizes each block where it is stored,
    merges the summaries in row order and finishes once, without gathering
    its rows. A subclass that overrides ``compute`` itself is not treated
    blockwise.
    """

    def compute(self, task, X, y, sample_weight, rows):
        return self.finish(task, self.summarize(task, X, y, sample_weight, rows))

    @abstractmethod
    def summarize(self, task, X, y, sample_weight, rows):
        """A summary of the site's rows ``X[rows]`` (one block of them)."""

    @abstractmethod
    def merge(self, first, second):
        """The summary of two disjoint blocks of rows, ``first`` before ``second``."""

    @abstractmethod
    def finish(self, task, summary):
        """The site's answer ``(fields, arrays)`` from the summary of all its rows."""
