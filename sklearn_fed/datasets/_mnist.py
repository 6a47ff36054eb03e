"""Loader for MNIST in the original idx format, from a path the user gives."""

import gzip
import struct
from pathlib import Path

import numpy as np

__all__ = ["load_mnist_idx"]


def _read_idx(path, magic):
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    got, = struct.unpack(">I", data[:4])
    if got != magic:
        raise ValueError(f"{path}: idx magic number {got}, expected {magic}")
    ndim = magic & 0xFF
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(shape)):
        raise ValueError(f"{path}: expected {int(np.prod(shape))} values, found {arr.size}")
    return arr.reshape(shape)


def load_mnist_idx(images_path, labels_path, *, scale=True):
    """Read MNIST images and labels from idx files (``.gz`` or not).

    Parameters
    ----------
    images_path, labels_path : path-like
        E.g. ``t10k-images-idx3-ubyte.gz`` and ``t10k-labels-idx1-ubyte.gz``.
    scale : bool, default=True
        Return float32 pixels in [0, 1]; otherwise the raw uint8.

    Returns
    -------
    X : ndarray of shape (n_samples, 784)
    y : ndarray of shape (n_samples,), int64

    Examples
    --------
    >>> import gzip, struct, tempfile, os, numpy as np
    >>> d = tempfile.mkdtemp()
    >>> with gzip.open(os.path.join(d, "i.gz"), "wb") as f:
    ...     _ = f.write(struct.pack(">IIII", 2051, 2, 28, 28) + bytes(2 * 784))
    >>> with gzip.open(os.path.join(d, "l.gz"), "wb") as f:
    ...     _ = f.write(struct.pack(">II", 2049, 2) + bytes([3, 7]))
    >>> X, y = load_mnist_idx(os.path.join(d, "i.gz"), os.path.join(d, "l.gz"))
    >>> X.shape, y.tolist()
    ((2, 784), [3, 7])
    """
    images = _read_idx(images_path, 2051)
    labels = _read_idx(labels_path, 2049)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{images.shape[0]} images but {labels.shape[0]} labels")
    X = images.reshape(images.shape[0], -1)
    X = X.astype(np.float32) / 255.0 if scale else X.copy()
    return X, labels.astype(np.int64)
