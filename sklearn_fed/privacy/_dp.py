"""Lazy import of the optional ``dp-accounting`` dependency (extra ``dp``)."""


def import_dp_accounting():
    """Return the ``dp_accounting`` module or raise an ImportError naming the extra."""
    try:
        import dp_accounting
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "This feature needs the 'dp-accounting' package; install it with "
            "pip install 'sklearn-fed[dp]'."
        ) from exc
    return dp_accounting
