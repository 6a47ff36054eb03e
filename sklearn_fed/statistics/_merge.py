"""Merging many statistics: :func:`merge_statistics` and :class:`StreamingMerge` (one tree).

Two messages merge by their own ``merge`` method (the pairwise update of
Chan et al., or the TSQR of two factors); here many are merged along a
balanced tree, which keeps round-off at O(log K), as they stream in.
"""

from ._message import ClientStatistics

__all__ = ["StreamingMerge", "merge_statistics"]


def merge_statistics(statistics):
    """Merge any number of client statistics (pairwise tree, exact).

    Parameters
    ----------
    statistics : iterable of ClientStatistics or of ColumnMoments
        At least one.

    Returns
    -------
    merged : ClientStatistics or ColumnMoments

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.statistics import ClientStatistics, merge_statistics
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    >>> parts = [ClientStatistics.from_data(X[i::3], y[i::3]) for i in range(3)]
    >>> whole = ClientStatistics.from_data(X, y)
    >>> np.allclose(merge_statistics(parts).gram, whole.gram)
    True
    """
    merger = StreamingMerge()
    for stats in statistics:
        merger.add(stats)
    if not merger:
        raise ValueError("merge_statistics needs at least one ClientStatistics.")
    return merger.result()


class StreamingMerge:
    """:func:`merge_statistics` fed one message at a time: the same tree, the same bits.

    A balanced tree keeps round-off at O(log K). It is built as a binary
    counter over the stream: at most log2(K) partial merges are held at
    once, so a server can fold each message as soon as it has read it
    instead of holding all K.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.statistics import ClientStatistics, StreamingMerge
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    >>> merger = StreamingMerge()
    >>> for i in range(3):
    ...     merger.add(ClientStatistics.from_data(X[i::3], y[i::3]))
    >>> parts = [ClientStatistics.from_data(X[i::3], y[i::3]) for i in range(3)]
    >>> bool(np.array_equal(merger.result().gram, merge_statistics(parts).gram))
    True
    """

    def __init__(self, *, owned=False):
        self._pending = []  # (number of messages, their merge), sizes decreasing
        self._done = False
        # Partial merges are always the stream's own; the messages only if ``owned``
        # (a server's freshly parsed replies): then a pair merges into the first.
        self._owned = owned
        self._count = 0

    def __len__(self):
        """Number of partial merges held (0 before the first message)."""
        return len(self._pending)

    def add(self, stats):
        """Fold the next message (in the order the merge must follow)."""
        if self._done:
            raise ValueError("StreamingMerge.add after result(): the stream has ended.")
        self._count += 1
        size = 1
        while self._pending and self._pending[-1][0] == size:
            stats = _merge_pair(self._pending.pop()[1], stats, own=size > 1 or self._owned)
            size *= 2
        self._pending.append((size, stats))

    @property
    def owns_result(self):
        """Whether no one else holds the arrays of :meth:`result`: a merge of two or more
        messages, or an ``owned`` message (so its Gram may lend work space)."""
        return self._owned or self._count > 1

    def result(self):
        """The merge of every message added; ends the stream (the partial merges are freed)."""
        if not self._pending:
            raise ValueError("StreamingMerge.result needs at least one message.")
        merged = self._pending.pop()[1]
        while self._pending:
            size, first = self._pending.pop()
            merged = _merge_pair(first, merged, own=size > 1 or self._owned)
        self._pending, self._done = [(None, merged)], True
        return merged


def _merge_pair(first, second, *, own):
    """``first.merge(second)``; when ``first`` is the caller's ``own`` (read by no one
    else), its Gram takes ``second``'s in place: no d x d allocation."""
    if own and isinstance(first, ClientStatistics) and first.gram.flags.writeable:
        return first._merge(second, reuse=True)
    return first.merge(second)

