"""The two roles of every protocol: a site (:class:`Client`) and the :class:`Server`.

The hooks an estimator family implements, what the framework guarantees before
each runs, and the optional speed-ups (one section of each role, each with a
default that is always correct) are described in :doc:`/developers`. Driving
the rounds (:func:`~sklearn_fed.protocol.run_rounds` and its transports) uses
only :meth:`Server.open_round` and :meth:`Server.receive_frames` (or
:meth:`Server.next_tasks` and :meth:`Server.receive` with bytes).
"""

import operator
import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping

import numpy as np

from ._client import BlockwiseClient, Client
from ._errors import InvalidClientMessage, failing
from ._ledger import CommunicationLedger
from ._schema import (
    FeatureSchema,
    check_agreement,
    malformed_reply_schema,
)
from ._wire import (
    DEFAULT_MAX_MESSAGE_BYTES,
    Frame,
    _as_key,
    decode,
    distinct_labels,
    encode,
    label_key,
    label_keys,
    plain_keys,
    sorted_labels,
)

__all__ = ["BlockwiseClient", "Client", "FederatedMixin", "FoldedReplies", "Server"]


class Server(ABC):
    """The server: plans rounds, validates replies, applies them atomically.

    Parameters
    ----------
    estimator : estimator
        The model the server fits; after any round it is usable (``server.estimator``).
    keys : dict, default=None
        Site label -> shared key (bytes, at least 16). A site with a key must
        sign its replies with it; tasks to it are signed too.
    on_invalid : {"raise", "drop"}, default="raise"
        A reply that fails validation: ``"raise"`` rejects the whole round
        (nothing applied) with :class:`InvalidClientMessage` naming the site;
        ``"drop"`` leaves that site out of the round, as dropout, and records
        why in ``dropped_``.
    feature_names : sequence of str, default=None
        The features, in order, that sites must use (DataFrame columns are
        matched by name). ``None``: taken from the first round's replies,
        which must agree.
    n_features : int, default=None
        Number of features, when names are not used.
    warm_start : bool, default=False
        Continue from the estimator's fitted state (``partial_fit``) instead
        of starting a new model.
    max_message_bytes : int, default=2**31
        Longer replies are refused before they are read.
    max_rounds : int, default=None
        Finish after this many applied rounds of this server (``fit`` of a
        streaming protocol runs one); ``None``: when the protocol is done.
    n_targets : int, default=None
        Number of targets every reply must describe (supervised protocols).
        Declared, a reply with another count is refused naming its site;
        ``None``: the round's replies must agree among themselves, and a
        disagreement refuses the round without naming any site.

    Attributes
    ----------
    federation : str
        Random id of this federation (32 hex digits); replies must echo it.
    round : int
        Id of the next round (a streaming protocol's warm-started server
        continues its federation's ids).
    rounds_applied : int
        Rounds this server has applied.
    dropped_ : dict
        Site -> reason, for replies dropped under ``on_invalid="drop"``.
    round_dtype : numpy.dtype
        Precision of the last applied round: float32 when every reply came
        from float32 rows, else float64 (the model's attributes follow it).
    """

    protocol = None
    #: Whether :func:`~sklearn_fed.protocol.run_rounds` prints a line per round when the
    #: estimator's ``verbose`` is set (a composite prints its steps instead).
    reports_rounds = True

    def __init__(
        self, estimator, *, keys=None, on_invalid="raise", feature_names=None, n_features=None,
        warm_start=False, max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES, max_rounds=None,
        n_targets=None,
    ):
        if on_invalid not in ("raise", "drop"):
            raise ValueError(f"on_invalid must be 'raise' or 'drop'; got {on_invalid!r}.")
        self.estimator = estimator
        self.keys = {label_key(site): _as_key(key) for site, key in (keys or {}).items()}
        self.on_invalid = on_invalid
        if warm_start and feature_names is None and n_features is None:
            self.schema = FeatureSchema.of(estimator)  # continue with the fitted features
        else:
            self.schema = FeatureSchema(n_features, feature_names)
        if n_targets is not None and not (isinstance(n_targets, int) and n_targets > 0):
            raise ValueError(f"n_targets must be a positive int or None; got {n_targets!r}.")
        self.n_targets = n_targets
        self.warm_start = warm_start
        self.max_message_bytes = int(max_message_bytes)
        self.max_rounds = max_rounds
        self.federation = secrets.token_hex(16)
        self.round = 0
        self.rounds_applied = 0
        self.finished = False
        self.dropped_ = {}
        self._open = None  # the open round: label key -> site
        self._task_bytes = None  # its tasks' sizes: site -> bytes
        self.round_dtype = np.dtype(np.float64)
        # Read, never changed: each round records on a copy (O(sites seen) per round).
        self._ledger = (
            estimator.communication_
            if warm_start and hasattr(estimator, "communication_") else None
        )

    # ------------------------------------------------------------ public API
    def next_tasks(self, sites):
        """The tasks of the next round, as ``{site: bytes}``; empty when finished.

        Parameters
        ----------
        sites : sequence of hashable
            Labels of the sites reachable now; a site left out is dropout.
            The server picks who takes part (all of them, unless the
            protocol samples clients).
        """
        frames = self.open_round(sites)
        return {site: encode(frame, key=self.key_of(site)) for site, frame in frames.items()}

    def receive(self, replies):
        """Validate every reply of the open round, then apply them all at once.

        Parameters
        ----------
        replies : dict
            Site label -> reply bytes (from :meth:`Client.respond`). Sites
            that were sent a task but do not reply are dropout.

        Raises
        ------
        InvalidClientMessage
            Naming the first bad reply; nothing of the round is applied
            (unless ``on_invalid="drop"``).
        """
        self.receive_frames(*self.decode_replies(replies))

    def decode_replies(self, replies):
        """``(frames, sizes, failures)`` of a round's reply bytes, for :meth:`receive_frames`.

        Each reply is authenticated with its site's key and decoded; one that
        fails is a failure naming its site. A server that folds replies
        (:meth:`reply_fold`) gets frames decoded only when read, so a round
        never holds every decoded reply at once.
        """
        sizes = {
            site: len(data) if isinstance(data, (bytes, bytearray, memoryview)) else 0
            for site, data in replies.items()
        }

        def frame_of(site):
            return decode(
                replies[site], key=self.key_of(site), client=site, max_bytes=self.max_message_bytes
            )

        if self.reply_fold() is not None:  # each decoded when read, so one is unpacked at a time
            return FramesOnDemand(replies, frame_of), sizes, {}
        frames, failures = {}, {}
        for site in replies:
            try:
                frames[site] = frame_of(site)
            except InvalidClientMessage as exc:
                failures[site] = exc
        return frames, sizes, failures

    # ------------------------------------------------------------ internals
    def key_of(self, site):
        return self.keys.get(label_key(site))

    def open_round(self, sites):
        plan = self.next_plan(sites)
        frames = {
            site: self.task_frame(site, fields, arrays) for site, (fields, arrays) in plan.items()
        }
        if frames:
            self.open_planned_round(
                dict(zip(label_keys(frames), frames)),
                {site: frame.nbytes for site, frame in frames.items()},
            )
        return frames

    @property
    def open_sites(self):
        """The sites sent a task in the open round (a read-only view), or None between rounds."""
        return None if self._open is None else self._open.values()

    def open_planned_round(self, sites, task_bytes):
        """Open a round whose tasks the caller planned (:meth:`next_plan`) and sent itself.

        :meth:`open_round` calls it; a transport that delivers one task to
        many sites at once (the simulation's pooled rounds) calls it directly.

        Parameters
        ----------
        sites : mapping
            ``{label key: site}`` of the sites that were sent a task
            (:func:`~sklearn_fed.protocol.label_key`); a lazy mapping is fine.
        task_bytes : dict
            ``{site: bytes}``: each task's size, for the ledger.
        """
        self._open = sites
        self._task_bytes = task_bytes

    def next_plan(self, sites):
        """``plan`` of the next round, ``{}`` (and finished) when there is none."""
        if self.max_rounds is not None and self.rounds_applied >= self.max_rounds:
            self.finished = True
        if self.finished:
            return {}
        sites = list(sites)
        plan = self.plan(sites)
        if not plan:
            self.finished = True
            self._open = None
        # A plan has one task per site it names: as many as sites means no two of
        # them are equal, which for plain labels means distinct sites.
        elif not (len(plan) == len(sites) and plain_keys(sites)) and not distinct_labels(sites):
            raise ValueError("sites must be distinct labels.")
        return plan

    def task_frame(self, site, fields, arrays):
        return Frame(
            kind=f"{self.protocol}/task",
            federation=self.federation,
            round=self.round,
            site=site,
            schema=self.schema.to_json(),
            fields=fields,
            arrays=arrays,
        )

    def _check_header(self, site, frame):
        fail = failing(site)
        if label_key(site) not in self._open:
            fail(f"no task was sent to this site in round {self.round}.")
        if frame.kind != f"{self.protocol}/reply":
            fail(f"expected a {self.protocol!r} reply, got {frame.kind!r}.")
        if frame.federation != self.federation:
            fail("the reply belongs to another federation (replayed or misrouted).")
        if frame.round != self.round:
            fail(f"the reply is for round {frame.round}, the open round is {self.round} "
                 "(stale or replayed).")
        if label_key(frame.site) != label_key(site):
            fail(f"the reply says it comes from site {frame.site!r}.")
        reason = malformed_reply_schema(frame.schema)
        if reason is not None:
            fail(reason)
        schema, expected = frame.schema, self.schema
        if expected.n_features is not None and schema["n_features"] != expected.n_features:
            fail(f"has {schema['n_features']} features, expected {expected.n_features}.")
        if expected.feature_names is not None and schema["names"] != expected.names_digest:
            fail("its features are not the federation's features (names or order differ).")
        if self.n_targets is not None and schema["n_targets"] != self.n_targets:
            fail(f"has {schema['n_targets']} targets, expected {self.n_targets}.")
        # known without any declaration: a protocol takes targets or it does not
        role = getattr(self.estimator, "_client_role", None)
        expects = None if role is None else True if role.needs_y else role.targets_in_reply
        if expects is not None and (schema["n_targets"] is not None) != expects:
            fail("describes targets, but this protocol takes none." if not expects else
                 "describes no targets, but this protocol needs them.")

    def receive_frames(self, frames, sizes, failures=None):
        if self._open is None:
            raise RuntimeError("no round is open: call next_tasks() before receive().")
        # a refused round leaves the server as it was, even what reading it noted (a hook's
        # check_round or cross_check may keep notes for apply)
        restore = self.savepoint()
        try:
            self._receive_checked(frames, sizes, failures)
        except BaseException:
            restore()
            raise

    def _receive_checked(self, frames, sizes, failures):
        parsed, failures = self.check_round(frames, failures)
        while True:
            if failures and self.on_invalid == "raise":
                raise next(iter(failures.values()))
            if not parsed:
                raise ValueError(f"no valid reply in round {self.round}; nothing was applied.")
            try:
                return self.commit_round(frames, parsed, sizes, failures)
            except InvalidClientMessage as exc:
                # apply named a site whose reply passed every check alone (its statistics
                # overflow the merged model): under "drop" it is left out like any invalid
                # reply, and the round is applied from the others (nothing was applied yet)
                culprit = label_key(exc.client)
                if self.on_invalid != "drop" or culprit not in label_keys(parsed):
                    raise
                failures[exc.client] = exc
                parsed = self._without(frames, parsed, culprit, failures)

    def _without(self, frames, parsed, culprit, failures):
        """The parsed replies of a round but one site's (read and folded again if folded)."""
        if not isinstance(parsed, FoldedReplies):
            return {site: reply for site, reply in parsed.items() if label_key(site) != culprit}
        kept = {site: None for site in parsed if label_key(site) != culprit}
        refolded = self._fold_round(FramesOnDemand(kept, frames.__getitem__), failures,
                                    self.reply_fold())
        refolded.frame_bytes.update(
            {site: n for site, n in parsed.frame_bytes.items() if label_key(site) == culprit})
        return refolded

    def savepoint(self):
        """A ``restore()`` callable that puts this server and its estimator back as they are now.

        For a composite protocol, which applies several servers' rounds as one
        (:meth:`commit_round` of each part): when a later part fails, the parts
        applied before it are restored, so the round is applied whole or not at
        all. Fitted attributes are replaced, never mutated in place; containers
        one level deep (``dropped_``, per-site dicts) may be mutated in place:
        their contents are saved too. ``restore()`` puts back the very objects
        saved, their contents refilled, so attributes that shared one object
        (``leaders_`` and the stream state holding it) still share it: a copy
        put back instead would leave two equal objects and a state that no
        longer pickles as it did.
        """
        def state(obj):
            attributes = dict(vars(obj))
            contents = [(value, list(value.items()) if isinstance(value, dict) else list(value))
                        for value in attributes.values() if isinstance(value, (dict, list, set))]
            return attributes, contents

        saved = [(obj, state(obj)) for obj in (self, self.estimator)]

        def restore():
            for obj, (attributes, contents) in saved:
                for container, items in contents:
                    if isinstance(container, list):
                        container[:] = items
                    else:
                        container.clear()
                        container.update(items)
                obj.__dict__.clear()
                obj.__dict__.update(attributes)

        return restore

    def check_round(self, frames, failures=None):
        """Check and parse every reply of the open round; returns ``(parsed, failures)``.

        Nothing is applied: a composite protocol parses all its parts'
        replies before it commits any (see :meth:`commit_round`).
        """
        failures = dict(failures or {})
        fold = self.reply_fold()
        if fold is not None:
            return self._fold_round(frames, failures, fold), failures
        parsed = {}
        for site, frame in frames.items():
            try:
                parsed[site] = self._read_checked(site, frame)
            except InvalidClientMessage as exc:
                failures[site] = exc
        check_agreement({site: frames[site].schema for site in parsed})
        for site, exc in self.cross_check(parsed).items():
            failures[site] = exc
            del parsed[site]
        return parsed, failures

    def commit_round(self, frames, parsed, sizes, failures):
        """Apply a parsed round: the new model, the ledger, then the next round id."""
        ledger = self._ledger.copy() if self._ledger is not None else CommunicationLedger()
        if isinstance(parsed, FoldedReplies):  # its frames were read once, not kept
            uplink = parsed.frame_bytes if not sizes else {
                site: sizes.get(site) or n for site, n in parsed.frame_bytes.items()
            }
            schemas = parsed.schemas
        else:
            uplink = {site: sizes.get(site) or frames[site].nbytes for site in frames}
            schemas = {site: frames[site].schema for site in parsed}
        ledger.record_round(self._task_bytes, uplink)
        # Sites usually share one schema object: look each distinct one up once.
        distinct = set(map(id, schemas.values()))
        dtypes = {schema.get("dtype") for schema in (
            [next(iter(schemas.values()))] if len(distinct) == 1 else schemas.values())}
        # A refused round leaves every attribute as it was, the hook's own included (a
        # composite's apply reads its parts' replies and may fail after changing some).
        restore = self.savepoint()
        self.round_dtype = np.dtype(np.float32 if dtypes == {"float32"} else np.float64)
        if self.schema.n_features is None:  # the round's features are the federation's now
            first = schemas[next(iter(parsed))]
            self.schema = FeatureSchema(first["n_features"], first.get("feature_names"))
        try:
            self.apply(parsed, ledger)
        except BaseException:
            restore()
            raise
        self._ledger = ledger
        for site, exc in failures.items():
            self.dropped_[site] = str(exc)
        self.round += 1
        self.rounds_applied += 1
        self._open = None

    def _read_checked(self, site, frame):
        """:meth:`read_reply` of a reply whose header passes; any failure names the site.

        A hostile reply must never raise anything but :class:`InvalidClientMessage`
        (an ``IndexError`` deep in a parser would crash the server and name nobody).
        """
        self._check_header(site, frame)
        try:
            return self.read_reply(site, frame)
        except InvalidClientMessage:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError,
                OverflowError, RecursionError) as exc:
            raise InvalidClientMessage(
                f"client {site!r}: unreadable reply ({type(exc).__name__}: {exc}).", site
            ) from exc

    def _fold_round(self, frames, failures, fold):
        """:meth:`check_round` of a server that folds replies (see :meth:`reply_fold`).

        Replies are read in label order, each validated, checked against the
        first valid one (as :meth:`_check_agreement` does) and folded before
        the next is read; ``frames`` may compute each frame when it is read
        (the simulation does), so only one reply is unpacked at a time.
        Records ``failures`` and returns :class:`FoldedReplies`.
        """
        frame_bytes, schemas = {}, {}
        for site in sorted_labels(frames):
            try:
                frame = frames[site]  # decoded or computed now, when frames are on demand
                frame_bytes[site] = frame.nbytes
                parsed = self._read_checked(site, frame)
            except InvalidClientMessage as exc:
                failures[site] = exc
                continue
            schemas[site] = frame.schema
            del frame  # the fold keeps what it needs: one reply is unpacked at a time
            fold.add(parsed)
            del parsed
        check_agreement(schemas)
        return FoldedReplies(self, frames, schemas, frame_bytes, fold)

    # ------------------------------------------------ speed-ups (optional)
    def reply_fold(self):
        """A fresh fold of this round's replies, or None (default) to keep every parsed reply.

        A family whose :meth:`apply` uses a round's replies only through one
        reduction in label order (a sum, an exact merge) may return an object
        whose ``add(parsed)`` folds the next valid reply. The server then
        reads, validates and folds the replies one at a time (the simulation
        computes each site's reply only when the server reads it) and hands
        :meth:`apply` a :class:`FoldedReplies`: the fold as ``.fold``, each
        reply parsed again only if it is looked up (e.g. to name a culprit
        after the reduction fails a check). Memory then holds the fold and
        one reply, not all of them. No fold where :meth:`cross_check`
        needs every reply at once.
        """
        return

    def pools_round(self, fields):
        """Whether a round whose tasks all carry ``fields`` (and no arrays) may be pooled.

        Pooled (see :func:`~sklearn_fed.protocol.run_simulation`): the
        simulation computes one reply from every site's rows together and
        hands it to :meth:`pooled_fold` instead of one reply per site. Only
        for a round whose result is provably the fold of the pooled rows'
        reply. ``fields=None`` asks before planning whether this server may
        pool at all; its :meth:`plan` must then have no side effects.
        Default: never.
        """
        return False

    def pooled_fold(self, site, reply, fewest_rows):
        """The fold of a pooled round (see :meth:`pools_round`) from the pooled ``reply``.

        Validates ``reply`` as a reply of ``site`` (raises
        :class:`InvalidClientMessage`) and returns the fold, or None when a
        site's own reply, from as few as ``fewest_rows`` of the rows, could
        fail a check the pooled one passes. On either failure the round runs
        site by site. By default None: a server that cannot vouch for its
        sites' replies never pools.
        """
        return

    # ------------------------------------------------------------ hooks
    def cross_check(self, replies):
        """Checks that need every reply of the round (e.g. duplicates, outliers).

        Returns ``{site: InvalidClientMessage}`` for the replies to refuse
        (dropped or raised as ``on_invalid`` says); by default none.
        """
        return {}

    @abstractmethod
    def plan(self, sites):
        """The next round's tasks.

        Parameters
        ----------
        sites : list of hashable
            The sites reachable now (distinct labels, in the caller's order).

        Returns
        -------
        tasks : dict
            ``{site: (fields, arrays)}``: a JSON-able dict and a dict of numpy
            arrays for each site that takes part; ``{}`` when the protocol is
            done (the server is then finished). ``self.round`` is the id of
            the round being planned; ``self.rounds_applied`` how many applied.
        """

    @abstractmethod
    def read_reply(self, site, frame):
        """Parse and check one reply of the open round.

        Called only for a reply that passed the framework's checks (see the
        module docstring): authentic, of this federation and round, with the
        declared features and targets. Check everything else a hostile site
        could send (shapes, finiteness, ranges, counts) and refuse by raising
        :class:`InvalidClientMessage` naming ``site``; any other exception is
        turned into one. Change no state: a round is applied only by
        :meth:`apply`, after every reply was read.

        Parameters
        ----------
        site : hashable
        frame : Frame
            ``frame.fields`` and ``frame.arrays`` as the site sent them.

        Returns
        -------
        parsed : object
            What :meth:`apply` receives for this site.
        """

    @abstractmethod
    def apply(self, replies, ledger):
        """Compute the new model from a round's replies, then commit it.

        Parameters
        ----------
        replies : mapping
            ``{site: parsed}`` (what :meth:`read_reply` returned) of every
            valid reply, in the order they were received; a
            :class:`FoldedReplies` when :meth:`reply_fold` folds them.
        ledger : CommunicationLedger
            This round's bytes recorded on a copy of the previous ledger:
            commit it with the model (e.g. ``estimator.communication_``).

        Raises anything to refuse the round: the server then keeps its
        schema and round, and the estimator is left as the caller's
        :func:`atomic` restores it. Replace fitted attributes, never mutate
        them in place.
        """


class FramesOnDemand(Mapping):
    """``{site: frame}`` whose frames are made when read (and again if read again).

    ``frame_of(site)`` makes one: the simulation computes the site's reply,
    :meth:`Server.receive` decodes its bytes. A server that folds replies
    (see :meth:`Server.reply_fold`) then holds one at a time, or, with
    ``ahead=(pool, workers, order, on_last)``, the ``workers`` that ``pool``
    makes ahead of the reader, who reads them in ``order``; ``on_last()``
    runs once the last site of ``order`` has been read.
    """

    def __init__(self, sites, frame_of, ahead=None):
        self._sites = sites
        self._frame_of = frame_of
        self._futures = {}  # site -> its frame, being made ahead
        self._order, self._next = [], 0
        if ahead is not None:
            self._pool, workers, order, self._on_last = ahead
            self._order = list(order)
            self._submit(workers)

    def _submit(self, count):
        for site in self._order[self._next : self._next + count]:
            self._futures[site] = self._pool.submit(self._frame_of, site)
        self._next = min(self._next + count, len(self._order))

    def __getitem__(self, site):
        if site not in self._sites:
            raise KeyError(site)
        future = self._futures.pop(site, None)
        if future is None:
            return self._frame_of(site)
        self._submit(1)  # keep the pool's threads busy, one reply ahead each
        try:
            return future.result()
        finally:
            if not self._futures and self._next == len(self._order):
                self._on_last()

    def __iter__(self):
        return iter(self._sites)

    def __len__(self):
        return len(self._sites)


class FoldedReplies(FramesOnDemand):
    """The valid replies of a round that a server folded as it read them (see ``reply_fold``).

    ``fold`` holds their reduction. Looking a site up parses its frame
    again (read from the round's frames, which the simulation recomputes),
    so a server that needs single replies only to explain a failure never
    holds them all. Iterates over the sites in the order of the frames.
    """

    def __init__(self, server, frames, schemas, frame_bytes, fold):
        same_order = len(schemas) == len(frames) and all(map(operator.is_, schemas, frames))
        self.schemas = schemas if same_order else {
            site: schemas[site] for site in frames if site in schemas
        }
        super().__init__(self.schemas, lambda site: server.read_reply(site, frames[site]))
        self.frame_bytes = frame_bytes
        self.fold = fold


class FederatedMixin:
    """``make_server`` and ``make_client`` for an estimator whose roles are set as class attributes.

    ``fit(X, y, clients=...)`` of every estimator that uses this mixin is an
    in-process run of these two roles (see :func:`run_simulation`).
    """

    #: The :class:`Server` and :class:`Client` subclasses of this estimator's protocol.
    _server_role = None
    _client_role = None

    def make_server(self, **kwargs):
        """The server role of this estimator's protocol; it fits this estimator.

        Parameters
        ----------
        **kwargs
            ``keys``, ``on_invalid``, ``feature_names``, ``n_features``,
            ``n_targets``, ``warm_start``, ``max_message_bytes``, ``max_rounds``: see
            :class:`Server`.

        Returns
        -------
        server : Server
        """
        return self._server_role(self, **kwargs)

    def make_client(self, *, key=None, policy=None, site=None):
        """The client role a site runs: answers tasks from its own rows.

        Parameters
        ----------
        key : bytes or str, default=None
            The site's shared key (HMAC-SHA256), also given to the server.
        policy : SitePolicy, default=None
            Tasks the site refuses.
        site : hashable, default=None
            The site's label; tasks addressed to another label are refused.

        Returns
        -------
        client : Client
        """
        return self._client_role(self, key=key, policy=policy, site=site)
