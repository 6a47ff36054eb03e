"""The errors of the protocol: one for a bad message, one for a task a site refuses."""

__all__ = ["InvalidClientMessage", "TaskRefused", "failing", "server_error", "who"]


class InvalidClientMessage(ValueError):
    """A message from a client (or its bytes) failed validation.

    Raised by the server before anything of the round is applied, so the
    estimator is left exactly as it was.

    Attributes
    ----------
    client : hashable or None
        The label of the client whose message was rejected.
    """

    def __init__(self, message, client=None):
        super().__init__(message)
        self.client = client


class TaskRefused(ValueError):
    """A site refused a task: its :class:`~sklearn_fed.protocol.SitePolicy` forbids it.

    Attributes
    ----------
    site : hashable or None
        The label of the refusing site.
    """

    def __init__(self, message, site=None):
        super().__init__(message)
        self.site = site


def who(client):
    """How error messages name a client."""
    return "client statistics" if client is None else f"client {client!r}"


def failing(client, prefix=""):
    """``fail(reason)`` for a reader of ``client``'s message: raises
    :class:`InvalidClientMessage` naming ``client`` (as :func:`who` does), then ``prefix + reason``."""
    def fail(reason):
        raise InvalidClientMessage(f"{who(client)}: {prefix}{reason}", client)

    return fail


def server_error(reason):
    """Refuse a malformed task or broadcast model: the site names the server."""
    raise InvalidClientMessage(f"server: {reason}", "server")
