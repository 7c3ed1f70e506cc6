"""The record pipeline: redaction, serialization and encryption of stored payloads.

Every payload-bearing field a backend stores passes through one record
pipeline on the way in and out (``redact -> serialize -> encrypt``, and back,
verifying before deserializing). Without settings it serializes only
(:class:`IdentityPipeline`); with ``encryption=Encryption(keyring)`` on a saver
every payload is encrypted and bound to its record identity.
"""

from .allowlist import AllowlistSerializer
from .encryption import Encryption, EncryptionPipeline
from .keyring import KeyProvider, KmsKeyring, LocalKeyring
from .pipeline import IdentityPipeline
from .redaction import Redaction, RedactionPipeline, Rule
from .serde import EnvelopeSerializer

__all__ = [
    "AllowlistSerializer",
    "Encryption",
    "EncryptionPipeline",
    "EnvelopeSerializer",
    "IdentityPipeline",
    "KeyProvider",
    "KmsKeyring",
    "LocalKeyring",
    "Redaction",
    "RedactionPipeline",
    "Rule",
]
