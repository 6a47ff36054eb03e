"""Secure aggregation: pairwise masks from X25519 key agreement that cancel in the sum.

The protocol (Bonawitz et al. 2017, without the secret-sharing recovery):

1. every site makes a fresh X25519 key pair for the round and sends the
   server its public key (:class:`MaskingKey`);
2. the server sends every site the list of all public keys; sites ``i`` and
   ``j`` each compute the same shared secret (Diffie-Hellman), stretch it by
   HKDF-SHA256 into a ChaCha20 key bound to the federation, the round and the
   two public keys, and expand that into a mask ``m_ij`` of 64-bit words;
3. site ``i`` sends ``e_i + sum_{j > i} m_ij - sum_{j < i} m_ji (mod 2^64)``
   (:func:`mask_vector`), where ``e_i`` is its vector in fixed point;
4. the server adds all masked vectors modulo ``2^64`` (:func:`unmask_sum`):
   every mask enters once with each sign, so the sum is ``sum_i e_i``.

What it protects, and what not
------------------------------
* The server never holds a private key or a shared secret, so a single masked
  vector is uniformly distributed given everything the server sees: it learns
  only the sum. This assumes the server relays the public keys faithfully
  (an *actively* malicious server could substitute its own keys and unmask;
  bind keys to sites out of band to stop that) and does not collude with
  sites (the server and site ``j`` together can remove ``j``'s masks).
* **Dropout after masking fails the round.** A site that received the keys
  and then does not reply leaves its masks in the others' vectors; without
  Bonawitz's secret sharing they cannot be removed, so :func:`unmask_sum`
  refuses a partial set and the server rejects the round (nothing applied).
  A new round with new keys among the remaining sites recovers.
* Masks come from ChaCha20 keyed by HKDF of the X25519 secret (the
  ``cryptography`` package, extra ``secure``), never from numpy.

Fixed point and the overflow bound
----------------------------------
A vector is sent as integers ``e = round(v / 2^k)`` (a grid of spacing
``2^k``), each checked *in integer arithmetic* to satisfy
``|e| <= M = floor((2^63 - 1) / K)`` for ``K`` parties (:func:`max_abs_encoded`).
Then ``|sum_i e_i| <= K M <= 2^63 - 1``: the sum modulo ``2^64``, read as a
signed 64-bit integer, *is* the integer sum, whatever the masks (they cancel
exactly in the ring). With ``K = 10,000`` sites, ``M`` is about ``9.2e14``.
"""

import functools
import hashlib

import numpy as np

from ..protocol._fields import reply_error, server_error
from ._dp import import_optional

__all__ = [
    "MaskingKey",
    "SecureAggregator",
    "fixed_point_decode",
    "fixed_point_encode",
    "mask_vector",
    "max_abs_encoded",
    "unmask_sum",
]

PUBLIC_KEY_BYTES = 32
_INT63 = 2**63 - 1


@functools.cache
def _crypto():
    import_optional("cryptography", "cryptography", "secure")
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import x25519
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return hashes, x25519, Cipher, algorithms, HKDF


def max_abs_encoded(n_parties):
    """Largest ``|e|`` each of ``n_parties`` may send so that the sum cannot wrap.

    ``floor((2^63 - 1) / n_parties)``, an exact Python integer.

    Examples
    --------
    >>> max_abs_encoded(1) == 2**63 - 1, max_abs_encoded(10_000)
    (True, 922337203685477)
    """
    n_parties = int(n_parties)
    if n_parties < 1:
        raise ValueError(f"n_parties must be >= 1; got {n_parties}.")
    return _INT63 // n_parties


def fixed_point_encode(values, grid_exponent, n_parties, *, party=None):
    """``round(values / 2^grid_exponent)`` as int64, refusing any value that could overflow.

    The bound ``|e| <= max_abs_encoded(n_parties)`` is checked on the int64
    values themselves (not on floats, whose rounding would let values just
    above the bound through).

    Parameters
    ----------
    values : array-like of float
    grid_exponent : int
        The grid's spacing is ``2^grid_exponent`` (scaling by a power of two is exact).
    n_parties : int
        How many vectors will be added.
    party : hashable, default=None
        Named in errors.

    Returns
    -------
    ndarray of int64

    Examples
    --------
    >>> fixed_point_encode([1.5, -0.25], -2, n_parties=3)
    array([ 6, -1])
    """
    values = np.asarray(values, dtype=np.float64)
    if not np.isfinite(values).all():
        raise ValueError(f"party {party!r}: cannot encode non-finite values.")
    exponent = -int(grid_exponent)
    if abs(exponent) <= 1000:  # 2^exponent is a normal float: exact, as ldexp
        scaled = values * 2.0**exponent
    else:
        scaled = np.ldexp(values, exponent)
    np.rint(scaled, out=scaled)
    limit = max_abs_encoded(n_parties)
    # The largest |scaled| is an integer-valued float; below 2^62 (exact in
    # float64) int() of it is exact, so the bound is checked on exact
    # integers, and the int64 conversion below is safe.
    largest = float(np.abs(scaled).max()) if scaled.size else 0.0
    if not largest < 2.0**62 or int(largest) > limit:
        peak = float(np.max(np.abs(values)))
        raise OverflowError(
            f"party {party!r}: |value| {peak:.4g} needs more than the "
            f"{limit} grid steps of 2^{grid_exponent} that {n_parties} parties can "
            "add in 64-bit fixed point; use a coarser grid or fewer rows per site."
        )
    return scaled.astype(np.int64)


def fixed_point_decode(encoded, grid_exponent):
    """Inverse of :func:`fixed_point_encode` (for a sum: the sum of the decoded values)."""
    return np.ldexp(np.asarray(encoded, dtype=np.int64).astype(np.float64), int(grid_exponent))


class MaskingKey:
    """A site's X25519 key pair for one round of secure aggregation.

    Parameters
    ----------
    private_bytes : bytes of length 32, default=None
        ``None`` (always, in a deployment): a fresh key from the operating
        system's random source. Fixed bytes are for reproducible simulations
        only; whoever knows them can unmask.

    Examples
    --------
    >>> key = MaskingKey()
    >>> len(key.public_bytes)
    32
    """

    def __init__(self, private_bytes=None):
        _, x25519, *_ = _crypto()
        if private_bytes is None:
            self._private = x25519.X25519PrivateKey.generate()
        else:
            self._private = x25519.X25519PrivateKey.from_private_bytes(bytes(private_bytes))
        self.public_bytes = self._private.public_key().public_bytes_raw()

    def __getstate__(self):
        # A deployed site keeps its key between the key round and the masked round, and
        # a Flower ClientApp is a new process per message: the node saves it in its own
        # state (skops, never sent). The X25519 object itself cannot be written.
        return {"private_bytes": self._private.private_bytes_raw()}

    def __setstate__(self, state):
        self.__init__(state["private_bytes"])

    def shared_secret(self, peer_public_bytes):
        """The X25519 secret shared with the holder of ``peer_public_bytes``."""
        _, x25519, *_ = _crypto()
        peer = x25519.X25519PublicKey.from_public_bytes(bytes(peer_public_bytes))
        return self._private.exchange(peer)


def check_public_keys(keys, n_parties=None):
    """Validate the server's ``(K, 32)`` uint8 table of public keys (distinct rows)."""
    if not (
        isinstance(keys, np.ndarray) and keys.dtype == np.uint8 and keys.ndim == 2
        and keys.shape[1] == PUBLIC_KEY_BYTES and keys.shape[0] >= 1
    ):
        server_error("public keys must be a (K, 32) uint8 array.")
    if n_parties is not None and keys.shape[0] != n_parties:
        server_error(f"{keys.shape[0]} public keys for {n_parties} parties.")
    if len({bytes(row) for row in keys}) != keys.shape[0]:
        server_error("the public keys are not distinct.")
    return keys


def mask_vector(encoded, own_key, own_index, public_keys, context, *, pair_keys=None,
                local_publics=()):
    """Site side: the masked vector ``e_i + sum_{j>i} m_ij - sum_{j<i} m_ji (mod 2^64)``.

    Parameters
    ----------
    encoded : ndarray of int64
        The site's vector in fixed point (:func:`fixed_point_encode`).
    own_key : MaskingKey
        The key whose public half is ``public_keys[own_index]``.
    own_index : int
        This site's position in ``public_keys``.
    public_keys : ndarray of shape (K, 32), dtype uint8
        Every party's public key, in the order the server fixed.
    context : bytes
        Binds the masks to one federation and round (so they are never reused).
    pair_keys : dict, default=None
        Only when one process runs several sites (a simulation): the pair
        keys a site derives for the sites in ``local_publics`` are left here
        for them, so each pair's key agreement is done once, not twice.
    local_publics : set of bytes, default=()
        Public keys of the other sites this process runs.

    Returns
    -------
    ndarray of uint64
    """
    keys = check_public_keys(public_keys)
    if not (0 <= own_index < keys.shape[0] and bytes(keys[own_index]) == own_key.public_bytes):
        server_error("this site's public key is not at its position in the key list.")
    hashes, _, Cipher, algorithms, HKDF = _crypto()
    message = np.asarray(encoded, dtype=np.int64).view(np.uint64).copy()
    for other in range(keys.shape[0]):
        if other == own_index:
            continue
        low, high = sorted((own_index, other))
        pair = (context, bytes(keys[low]), bytes(keys[high]))
        key = None if pair_keys is None else pair_keys.pop(pair, None)
        if key is None:  # the pair's ChaCha20 key, bound to the round and both public keys
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                       info=b"sklearn-fed/secure-aggregation/v1|" + b"".join(pair),
                       ).derive(own_key.shared_secret(keys[other]))
            if pair_keys is not None and bytes(keys[other]) in local_publics:
                pair_keys[pair] = key
        # The mask words: the key's ChaCha20 keystream (one stream per key: a zero nonce is safe).
        cipher = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
        stream = np.frombuffer(cipher.update(bytes(8 * message.shape[0])), dtype="<u8")
        if other > own_index:
            message += stream
        else:
            message -= stream
    return message


def unmask_sum(masked, size, *, parties=None):
    """Server side: the integer sum of every party's vector from their masked vectors.

    Parameters
    ----------
    masked : dict or list
        Party -> masked vector (1-D uint64 of length ``size``); every party
        that received the keys must be present, or the masks do not cancel.
    size : int
        Expected length.
    parties : sequence, default=None
        Every party that was sent the keys. A missing one fails the round.

    Returns
    -------
    ndarray of int64

    Raises
    ------
    InvalidClientMessage
        A vector that is not 1-D uint64 of length ``size``, or the same
        vector under two parties (a replay), naming the party.
    ValueError
        A party is missing (it dropped after masking).
    """
    items = dict(masked) if isinstance(masked, dict) else dict(enumerate(masked))
    if parties is not None:
        missing = [p for p in parties if p not in items]
        if missing:
            raise ValueError(
                f"secure aggregation: site(s) {missing} dropped after receiving the keys; "
                "their masks are in the other sites' vectors and do not cancel. The round "
                "is rejected (nothing applied); run a new round without them."
            )
    total = np.zeros(int(size), dtype=np.uint64)
    seen = {}
    for party, vector in items.items():
        if not (isinstance(vector, np.ndarray) and vector.dtype == np.uint64
                and vector.shape == (int(size),)):
            reply_error(party, f"a masked vector must be 1-D uint64 of length {size}.")
        digest = hashlib.sha256(vector.tobytes()).digest()
        if digest in seen:
            reply_error(party, f"sent the same masked vector as {seen[digest]!r} (replayed).")
        seen[digest] = party
        total += vector
    return total.view(np.int64)


class SecureAggregator:
    """Secure aggregation run in one process: the sites' and the server's code together.

    The same :class:`MaskingKey`, :func:`mask_vector` and :func:`unmask_sum`
    that sites and a server run in a deployment (see the module docstring).

    Parameters
    ----------
    n_clients : int
        Number of parties; all must report.
    seed : int, default=None
        ``None``: fresh keys from the operating system. An integer derives
        the private keys from it (reproducible simulations only: whoever
        knows the seed can unmask).
    fractional_bits : int, default=24
        Fixed-point grid ``2^-fractional_bits``.
    context : bytes, default=b""
        What the masks are bound to (a federation and round in a deployment).

    Examples
    --------
    >>> import numpy as np
    >>> agg = SecureAggregator(n_clients=3)
    >>> values = [np.array([1.5, -2.0]), np.array([0.25, 1.0]), np.array([3.0, 0.5])]
    >>> messages = [agg.mask(k, v) for k, v in enumerate(values)]
    >>> agg.aggregate(messages)
    array([ 4.75, -0.5 ])
    """

    def __init__(self, n_clients, seed=None, *, fractional_bits=24, context=b""):
        if int(n_clients) < 1:
            raise ValueError(f"n_clients must be >= 1; got {n_clients!r}.")
        if not 0 <= int(fractional_bits) <= 52:
            raise ValueError(f"fractional_bits must be in [0, 52]; got {fractional_bits!r}.")
        self.n_clients = int(n_clients)
        self.fractional_bits = int(fractional_bits)
        self.context = bytes(context)
        self._keys = [
            MaskingKey(None if seed is None else hashlib.sha256(
                b"sklearn-fed/simulated-key|%d|%d" % (int(seed), k)).digest())
            for k in range(self.n_clients)
        ]
        self.public_keys = np.array(
            [np.frombuffer(key.public_bytes, dtype=np.uint8) for key in self._keys]
        )

    @property
    def max_abs_value(self):
        """Largest ``|value|`` a client may encode so the sum cannot overflow."""
        return max_abs_encoded(self.n_clients) * 2.0**-self.fractional_bits

    def encode(self, values, client=None):
        """Fixed-point encoding (:func:`fixed_point_encode`) as uint64 (two's complement)."""
        return fixed_point_encode(
            values, -self.fractional_bits, self.n_clients, party=client
        ).view(np.uint64)

    def decode(self, encoded):
        """Inverse of :meth:`encode` (for a sum: the sum of the encoded values)."""
        return fixed_point_decode(np.asarray(encoded).view(np.int64), -self.fractional_bits)

    def mask(self, client, values):
        """Masked message of client number ``client`` (0..n_clients-1)."""
        if not 0 <= int(client) < self.n_clients:
            raise ValueError(f"client index must be in [0, {self.n_clients}); got {client!r}.")
        encoded = self.encode(values, client=client).view(np.int64)
        return mask_vector(encoded, self._keys[client], int(client), self.public_keys,
                           self.context)

    def aggregate(self, messages):
        """Sum all clients' masked messages modulo 2^64 and decode."""
        messages = list(messages)
        size = np.asarray(messages[0]).shape[0] if messages and np.ndim(messages[0]) == 1 else 0
        return self.decode(unmask_sum(messages, size, parties=range(self.n_clients)))
