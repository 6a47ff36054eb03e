"""Privacy: mechanisms, accounting, and attacks used for audits."""

# gradient-inversion audit (needs torch): loaded on first access
_INVERSION = ("gradient_inversion", "inversion_audit", "reconstruction_ssim")


def __getattr__(name):
    if name in _INVERSION:
        from . import _inversion

        return getattr(_inversion, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["gradient_inversion", "inversion_audit", "reconstruction_ssim"]
