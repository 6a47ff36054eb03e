"""A round's replies read one at a time: folded as they are read, or made when read."""

import operator
from collections.abc import Mapping

__all__ = ["FoldedReplies", "FramesOnDemand"]


class FoldedReplies(Mapping):
    """The valid replies of a round that a server folded as it read them (see ``reply_fold``).

    ``fold`` holds their reduction. Looking a site up parses its frame
    again (read from the round's frames, which the simulation recomputes),
    so a server that needs single replies only to explain a failure never
    holds them all. Iterates over the sites in the order of the frames.
    """

    def __init__(self, server, frames, schemas, frame_bytes, fold):
        self._server = server
        self._frames = frames
        same_order = len(schemas) == len(frames) and all(map(operator.is_, schemas, frames))
        self.schemas = schemas if same_order else {
            site: schemas[site] for site in frames if site in schemas
        }
        self.frame_bytes = frame_bytes
        self.fold = fold

    def __getitem__(self, site):
        if site not in self.schemas:
            raise KeyError(site)
        return self._server.read_reply(site, self._frames[site])

    def __iter__(self):
        return iter(self.schemas)

    def __len__(self):
        return len(self.schemas)


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
