"""Gradient-inversion audit: how much of a client's input can the server rebuild?

A DLG-style attack (Zhu et al., "Deep Leakage from Gradients", with the
label read off the last bias gradient as in iDLG) optimizes a dummy input so
that its gradient matches what the server observed. Point it at the raw
gradient (FedSGD) or at the estimate the server decodes from an MPDD message,
and score the reconstruction with SSIM.
"""

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from skimage.metrics import structural_similarity

__all__ = ["gradient_inversion", "inversion_audit", "reconstruction_ssim"]


def reconstruction_ssim(true, reconstructed, *, data_range=1.0):
    """SSIM of two images (Gaussian weights, sigma 1.5, population covariance).

    Parameters
    ----------
    true, reconstructed : array-like of the same shape
        Images; flat vectors of a square number of pixels are reshaped to square.
    data_range : float, default=1.0
        ``max - min`` of the pixel scale.

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> img = np.random.default_rng(0).random((28, 28))
    >>> round(reconstruction_ssim(img, img), 6)
    1.0
    """
    a = np.asarray(true, dtype=np.float64)
    b = np.asarray(reconstructed, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    if a.ndim == 1:
        side = int(round(a.size ** 0.5))
        if side * side != a.size:
            raise ValueError(f"a flat image must have a square size, got {a.size}")
        a, b = a.reshape(side, side), b.reshape(side, side)
    a, b = np.squeeze(a), np.squeeze(b)
    return float(structural_similarity(
        a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
        data_range=float(data_range),
    ))


def _flat_grad(module, x, label, create_graph=False):
    params = [p for p in module.parameters() if p.requires_grad]
    loss = F.cross_entropy(module(x), label)
    grads = torch.autograd.grad(loss, params, create_graph=create_graph)
    return torch.cat([g.reshape(-1) for g in grads])


def gradient_inversion(module, observed_gradient, input_shape, *, label=None, n_classes=None,
                       n_iter=30, random_state=0):
    """Reconstruct one input from an observed gradient (DLG with L-BFGS).

    Parameters
    ----------
    module : torch.nn.Module
        The model at the round's parameters (the attacker knows it).
    observed_gradient : tensor of shape (d,)
        What the server saw: the raw gradient or a decoded estimate.
    input_shape : tuple
        Shape of one input batch, e.g. ``(1, 784)``.
    label : int, default=None
        True label if known; otherwise inferred from the most negative entry
        of the last bias gradient (iDLG), which the attacker can do.
    n_classes : int, default=None
        Size of the last bias, needed to infer the label (defaults to the
        module's output width).
    n_iter : int, default=30
        L-BFGS outer steps (each up to 20 inner iterations, history 100).
    random_state : int, default=0
        Seed of the dummy input.

    Returns
    -------
    reconstruction : ndarray of shape ``input_shape``
    label : int
    """
    target = torch.as_tensor(observed_gradient, dtype=torch.float32).detach()
    if label is None:
        k = n_classes or list(module.parameters())[-1].numel()
        label = int(torch.argmin(target[-k:]))
    y = torch.tensor([int(label)])
    gen = torch.Generator().manual_seed(int(random_state))
    x = torch.rand(input_shape, generator=gen).requires_grad_(True)
    opt = torch.optim.LBFGS([x], lr=1.0, history_size=100, max_iter=20,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        obj = ((_flat_grad(module, x, y, create_graph=True) - target) ** 2).sum()
        obj.backward()
        return obj

    for _ in range(int(n_iter)):
        opt.step(closure)
    return x.detach().numpy(), int(label)


@dataclass
class InversionAudit:
    """Result of :func:`inversion_audit`."""

    uplink: str
    ssim: float
    label_recovered: bool
    reconstruction: np.ndarray


def inversion_audit(module, x, y, *, uplink="mpdd", n_directions=400, seed=0, n_iter=30,
                    data_range=1.0):
    """Attack one client's single-sample gradient as the server would see it.

    Parameters
    ----------
    module : torch.nn.Module
    x : array-like of shape (n_features,) or image shape
        The private input (one sample).
    y : int
        Its label.
    uplink : {"full", "mpdd"}, default="mpdd"
        ``"full"``: the attacker sees the gradient (FedSGD); ``"mpdd"``: it
        sees the estimate decoded from ``n_directions`` directional derivatives.
    n_directions, seed : int
        The MPDD message parameters.
    n_iter : int
        L-BFGS steps of the attack.
    data_range : float
        Pixel range for SSIM.

    Returns
    -------
    InversionAudit

    Examples
    --------
    >>> import torch
    >>> from sklearn_fed.neural_network import LeNet
    >>> torch.manual_seed(0) and None
    >>> x = torch.rand(784)
    >>> audit = inversion_audit(LeNet(), x, 3, uplink="full", n_iter=2)
    >>> audit.uplink, audit.label_recovered
    ('full', True)
    """
    from ..neural_network._codecs import make_codec  # imports numba (~0.3 s)

    x = torch.as_tensor(np.asarray(x), dtype=torch.float32).reshape(1, -1)
    label = torch.tensor([int(y)])
    g = _flat_grad(module, x, label).detach()
    if uplink == "full":
        seen = g
    elif uplink == "mpdd":
        codec = make_codec("mpdd", n_directions=n_directions)
        seen = codec.decode(codec.encode(g, seed=seed), g.shape[0])
    else:
        raise ValueError(f"uplink must be 'full' or 'mpdd', got {uplink!r}")
    rec, got = gradient_inversion(module, seen, tuple(x.shape), n_iter=n_iter)
    rec = np.clip(rec, 0.0, float(data_range))
    return InversionAudit(uplink, reconstruction_ssim(x.numpy().ravel(), rec.ravel(),
                                                      data_range=data_range),
                          got == int(y), rec.reshape(x.shape[1:]))
