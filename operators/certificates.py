"""Self-signed serving certificates for the admission webhook, built with ``cryptography``.

kopf would build them through ``certbuilder``/``oscrypto``, and oscrypto cannot load
OpenSSL 3.0.10 and newer. Used by the webhook server (a certificate per process) and by
``dralloc webhook-cert`` (the shared certificate the manifests' Job writes).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence


def build_self_signed_certificate(hostnames: Sequence[str]) -> tuple[bytes, bytes]:
    """A CA-capable self-signed certificate valid for the hostnames and IPs given."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    names: list[x509.GeneralName] = []
    common_name = ""
    for hostname in dict.fromkeys(hostnames):
        try:
            address = ipaddress.ip_address(hostname)
        except ValueError:
            names.append(x509.DNSName(hostname))
            common_name = common_name or hostname
            continue
        if not address.is_unspecified:
            names.append(x509.IPAddress(address))
            common_name = common_name or str(address)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or "dralloc")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert_pem, key_pem
