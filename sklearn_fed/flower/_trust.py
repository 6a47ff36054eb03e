"""What a model file or a node's saved state may hold, and how large it may be.

Both are zip archives read from a disk or a Flower context that someone else
may have written: :func:`check_archive` checks their sizes and array headers
before anything is read, and only the types named in :data:`MODEL_TYPES` (and
:data:`STATE_TYPES` for a node's state) are rebuilt, each named where it is
defined. What is refused and why: :doc:`/security` ("Files a node or a server
reads").
"""

import io
import json
import math
import zipfile

import numpy as np

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_DEPTH",
    "MAX_EXPANSION",
    "MODEL_FUNCTIONS",
    "MODEL_TYPES",
    "SKOPS_LOADERS",
    "STATE_TYPES",
    "check_archive",
    "check_depth",
    "read_json",
    "trusted_class",
]

#: Default cap on the decompressed size of a model file or a node's state (bytes).
DEFAULT_MAX_BYTES = 256 * 2**20
#: A member set may decompress to at most this many times the archive's size (+ 1 MiB).
MAX_EXPANSION = 32
_EXPANSION_FLOOR = 2**20
#: Deepest nesting of a model's schema or a state tree (Python rebuilds them recursively).
MAX_DEPTH = 100
_MAX_HEADER = 10_000  # numpy's own default max_header_size
# a string dtype longer than this (itemsize in bytes) is no fitted attribute of ours
_MAX_ITEMSIZE = 4096

# sklearn-fed's estimators (every protocol estimator and baseline) and what their fitted
# attributes hold; canonical names, checked against the classes by the tests
_OUR_ESTIMATORS = (
    "sklearn_fed.baselines._dp_fedavg.DPFedAvgRegressor",
    "sklearn_fed.baselines._fedavg.FedAvgRegressor",
    "sklearn_fed.baselines._fednova.FedNovaRegressor",
    "sklearn_fed.baselines._fedprox.FedProxRegressor",
    "sklearn_fed.compose.FederatedColumnTransformer",
    "sklearn_fed.covariance._empirical.FederatedEmpiricalCovariance",
    "sklearn_fed.decomposition._pca.FederatedPCA",
    "sklearn_fed.decomposition._private.PrivateFederatedPCA",
    "sklearn_fed.impute._private.PrivateFederatedSimpleImputer",
    "sklearn_fed.preprocessing._private.PrivateFederatedOneHotEncoder",
    "sklearn_fed.preprocessing._private.PrivateFederatedStandardScaler",
    "sklearn_fed.impute._base.FederatedSimpleImputer",
    "sklearn_fed.linear_model._federated_ridge.FederatedRidge",
    "sklearn_fed.linear_model._federated_ridge_cv.FederatedRidgeCV",
    "sklearn_fed.linear_model._fesc.FESCRidge",
    "sklearn_fed.linear_model._incremental.IncrementalFederatedRidge",
    "sklearn_fed.linear_model._logistic.FederatedLogisticRegression",
    "sklearn_fed.linear_model._logistic_cv.FederatedLogisticRegressionCV",
    "sklearn_fed.metrics._evaluate.FederatedEvaluator",
    "sklearn_fed.model_selection._search.FederatedGridSearchCV",
    "sklearn_fed.model_selection._search.FederatedRandomizedSearchCV",
    "sklearn_fed.linear_model._private.PrivateFederatedRidge",
    "sklearn_fed.linear_model._projected.ProjectedFederatedRidge",
    "sklearn_fed.linear_model._ridge_classifier.FederatedRidgeClassifier",
    "sklearn_fed.linear_model._ridge_classifier.FederatedRidgeClassifierCV",
    "sklearn_fed.pipeline.FederatedPipeline",
    "sklearn_fed.preprocessing._data.FederatedMinMaxScaler",
    "sklearn_fed.preprocessing._data.FederatedStandardScaler",
    "sklearn_fed.preprocessing._encoders.FederatedOneHotEncoder",
)
_OUR_PARTS = (
    "sklearn_fed.linear_model._incremental_model._Model",
    "sklearn_fed.privacy._accounting.PrivacyLedger",
    "sklearn_fed.protocol._ledger.CommunicationLedger",
    "sklearn_fed.statistics._message.ClientStatistics",
    "sklearn_fed.statistics._moments.ColumnMoments",
)
_NUMPY_SCALARS = tuple(
    f"numpy.{name}" for name in (
        "bool", "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
        "uint64", "float16", "float32", "float64", "longdouble", "complex64", "complex128",
        "str_", "bytes_",
    )
)
_OTHERS = (
    "builtins.bool", "builtins.bytes", "builtins.complex", "builtins.dict", "builtins.float",
    "builtins.int", "builtins.list", "builtins.NoneType", "builtins.set", "builtins.slice",
    "builtins.str", "builtins.tuple", "builtins.type",
    # rebuilt as plain dicts, running no code
    "collections.Counter", "collections.OrderedDict",
    "numpy.ndarray", "numpy.dtype",
    # a search's cv_results_ parameter columns, as scikit-learn's (data and mask arrays)
    "numpy.ma.MaskedArray",
    # the baselines' generator: skops sets its state, no code from the file runs
    "numpy.random.mtrand.RandomState",
    # the data-free steps a federated pipeline fits at every site (_composite.DATA_FREE;
    # FunctionTransformer is also what ColumnTransformer fits for remainder="passthrough")
    "sklearn_fed.privacy._bounds.RangeScaler",
    "sklearn.preprocessing._function_transformer.FunctionTransformer",
    "sklearn.preprocessing._polynomial.PolynomialFeatures",
    "sklearn.preprocessing._polynomial.SplineTransformer",
    "sklearn.random_projection.GaussianRandomProjection",
    "sklearn.random_projection.SparseRandomProjection",
    "sklearn.kernel_approximation.RBFSampler",
    "sklearn.preprocessing._data.Normalizer",
    "sklearn.preprocessing._data.Binarizer",
    # what those hold: SparseRandomProjection's components, SplineTransformer's splines
    "scipy.sparse._csr.csr_matrix",
    "scipy.interpolate._bsplines.BSpline",
)
#: Functions a model file may name (skops imports them and calls nothing): the array
#: namespace scipy's BSpline keeps (SplineTransformer's splines).
MODEL_FUNCTIONS = frozenset({
    "scipy._lib.array_api_compat.numpy._aliases.asarray",
})

#: Every type a model file written by ``save_model`` may hold (``module.qualname``).
MODEL_TYPES = frozenset(_OUR_ESTIMATORS + _OUR_PARTS + _NUMPY_SCALARS + _OTHERS)

#: sklearn-fed's classes a client role keeps between messages (rebuilt from their state;
#: :mod:`._state` tags builtins and arrays itself).
STATE_TYPES = frozenset({
    "sklearn_fed.privacy._secure_aggregation.MaskingKey",
    "sklearn_fed.statistics._message.ClientStatistics",
    "sklearn_fed.statistics._moments.ColumnMoments",
})

#: skops loaders that rebuild data only (no callable from the file is ever called);
#: "FunctionNode" is accepted for the names of :data:`MODEL_FUNCTIONS` only
SKOPS_LOADERS = frozenset({
    "DictNode", "DTypeNode", "JsonNode", "ListNode", "MaskedArrayNode", "NdArrayNode",
    "ObjectNode",
    "RandomStateNode", "SetNode", "SliceNode", "SparseMatrixNode", "TupleNode", "TypeNode",
})


def trusted_class(name, allowed):
    """The class named ``name`` if it is in ``allowed`` and defined under that name, else None.

    Examples
    --------
    >>> trusted_class("sklearn_fed.linear_model._federated_ridge.FederatedRidge",
    ...               MODEL_TYPES).__name__
    'FederatedRidge'
    >>> trusted_class("sklearn_fed.datasets._mnist.Path", MODEL_TYPES) is None
    True
    """
    if not isinstance(name, str) or name not in allowed:
        return None
    import importlib

    module, _, qualname = name.rpartition(".")
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return None
    if not isinstance(found, type) or f"{found.__module__}.{found.__qualname__}" != name:
        return None
    return found


def _plain_dtype(dtype):
    return (dtype.fields is None and dtype.subdtype is None and dtype.kind in "biufcUS"
            and 0 < dtype.itemsize <= _MAX_ITEMSIZE)


def check_archive(data, where, *, max_bytes=None, nested=False):
    """Check a zip archive's sizes and array headers before anything is read from it.

    Parameters
    ----------
    data : bytes
        The whole archive.
    where : str
        What the archive is (a file name, "node state 'x'"), for the error.
    max_bytes : int, default=None
        Cap on the decompressed size; None means :data:`DEFAULT_MAX_BYTES`.
    nested : bool, default=False
        Whether ``data`` is a member of another archive (an ``.npz`` member is
        checked the same way, one level deep).

    Raises
    ------
    ValueError
        Naming ``where`` and what is wrong.

    Examples
    --------
    >>> import io, numpy as np
    >>> buffer = io.BytesIO()
    >>> np.savez(buffer, a=np.arange(3.0))
    >>> check_archive(buffer.getvalue(), "example.npz")
    >>> check_archive(buffer.getvalue(), "example.npz", max_bytes=16)
    Traceback (most recent call last):
    ...
    ValueError: example.npz: ... bytes, more than the cap of 16 bytes (raise max_bytes if you trust it).
    """
    cap = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)
    if len(data) > cap:
        raise ValueError(f"{where}: {len(data)} bytes, more than the cap of {cap} bytes "
                         "(raise max_bytes if you trust it).")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{where}: not a readable zip archive ({exc}).") from None
    with archive:
        members = archive.infolist()
        total = sum(info.file_size for info in members)
        if total > cap:
            raise ValueError(f"{where}: decompresses to {total} bytes, more than the cap of "
                             f"{cap} bytes (raise max_bytes if you trust it).")
        if total > MAX_EXPANSION * len(data) + _EXPANSION_FLOOR:
            raise ValueError(
                f"{where}: decompresses to {total} bytes from {len(data)} ({total // len(data)} "
                f"times; more than {MAX_EXPANSION}): a compression bomb, not a file "
                "sklearn-fed wrote.")
        for info in members:
            if info.filename.endswith(".npy"):
                _check_npy(archive, info, where)
            elif info.filename.endswith(".npz"):  # a sparse matrix skops wrote with scipy
                if nested:
                    raise ValueError(f"{where}: an archive in an archive in an archive.")
                check_archive(archive.read(info), f"{where}: {info.filename!r}",
                              max_bytes=cap, nested=True)


def _check_npy(archive, info, where):
    what = f"{where}: array {info.filename!r}"
    try:
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            if version not in ((1, 0), (2, 0), (3, 0)):
                raise ValueError(f"unknown .npy version {version}")
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _fortran, dtype = read_header(member, max_header_size=_MAX_HEADER)
            header = member.tell()
    except (ValueError, OSError, EOFError, TypeError, SyntaxError, zipfile.BadZipFile,
            NotImplementedError, RuntimeError) as exc:
        raise ValueError(f"{what} has no valid .npy header ({exc}).") from None
    if not _plain_dtype(dtype):
        raise ValueError(f"{what} has dtype {dtype!s}; only plain numbers, booleans and "
                         "strings are read.")
    count = math.prod(shape)
    if header + count * dtype.itemsize != info.file_size:
        raise ValueError(
            f"{what} says shape {shape} of {dtype.str} ({count * dtype.itemsize} bytes) but "
            f"holds {info.file_size - header}: truncated or forged.")


def check_depth(tree, where, limit=MAX_DEPTH):
    """Refuse a JSON tree nested deeper than ``limit`` (walked without recursion).

    Examples
    --------
    >>> check_depth([[1, {"a": [2]}]], "x", limit=5)
    >>> check_depth([[[[[1]]]]], "x", limit=5)
    Traceback (most recent call last):
    ...
    ValueError: x: nested deeper than 5 levels.
    """
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise ValueError(f"{where}: nested deeper than {limit} levels.")
        if isinstance(node, dict):
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            stack.extend((value, depth + 1) for value in node)


def read_json(data, where):
    """``json.loads(data)`` with every failure (bad text, too deep) a ValueError naming ``where``."""
    try:
        tree = json.loads(data)
    except (ValueError, RecursionError, TypeError) as exc:
        raise ValueError(f"{where}: not valid JSON ({type(exc).__name__}: {exc}).") from None
    check_depth(tree, where)
    return tree
