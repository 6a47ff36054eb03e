"""TLS certificates and SuperNode keys for a Flower federation, made with ``cryptography``.

What an operator makes once per federation (see :doc:`/deploying_flower`): a
certificate authority and the SuperLink's certificate signed by it, which
every SuperNode and the ``flwr`` CLI check, and one key pair per SuperNode,
whose public half is enrolled at the SuperLink. These are the files
:class:`~sklearn_fed.flower.LocalFederation` makes for its own processes;
production CAs are usually an organisation's own.
"""

import datetime
import ipaddress
from pathlib import Path

__all__ = ["make_node_key", "make_tls_files"]

_VALID_DAYS = 30  # a test or demo federation's certificates; operators set their own


def _private(path, data):
    path = Path(path)
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def _name(common_name):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_tls_files(directory, hosts=("127.0.0.1", "localhost"), *, ca_name="sklearn-fed CA"):
    """Write ``ca.crt``, ``server.pem`` and ``server.key`` under ``directory``.

    Parameters
    ----------
    directory : path-like
        Made if missing.
    hosts : sequence of str, default=("127.0.0.1", "localhost")
        Addresses and DNS names the SuperLink is dialled at (the certificate's
        subject alternative names; TLS checks the dialled name against them).
    ca_name : str, default="sklearn-fed CA"

    Returns
    -------
    files : dict
        ``{"ca": Path, "cert": Path, "key": Path}``; the keys are readable by
        their owner only.

    Examples
    --------
    >>> import tempfile
    >>> from sklearn_fed.flower._credentials import make_tls_files
    >>> files = make_tls_files(tempfile.mkdtemp())
    >>> sorted(files)
    ['ca', 'cert', 'key']
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=_VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name)).issuer_name(_name(ca_name))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server_key = ec.generate_private_key(ec.SECP384R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(str(hosts[0]))).issuer_name(ca_cert.subject)
        .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca_cert.public_bytes(pem))
    cert_path = directory / "server.pem"
    cert_path.write_bytes(server_cert.public_bytes(pem))
    key_path = _private(directory / "server.key", server_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return {"ca": ca_path, "cert": cert_path, "key": key_path}


def make_node_key(directory, name):
    """Write a SuperNode's key pair: ``<name>`` (private) and ``<name>.pub`` (to enroll).

    Both in OpenSSH format, ECDSA P-384: what ``flower-supernode
    --auth-supernode-private-key`` and ``flwr supernode register`` read
    (the same files ``ssh-keygen -t ecdsa -b 384 -N ''`` writes).

    Returns
    -------
    private, public : Path

    Examples
    --------
    >>> import tempfile
    >>> from sklearn_fed.flower._credentials import make_node_key
    >>> private, public = make_node_key(tempfile.mkdtemp(), "north")
    >>> public.read_text().startswith("ecdsa-sha2-nistp384 ")
    True
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    private = _private(directory / name, key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption()))
    public = directory / f"{name}.pub"
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + b"\n")
    return private, public
