"""The content digests a dataset's checksums are made with: ``sha256`` or ``blake3``, by name.

Every checksum a manifest holds (a shard file's, a sample-index file's, each record's 8-byte
digest, each source item's) is made with one algorithm, which the manifest names (``digest``;
absent: ``sha256``, as every dataset before 0.4 has it). SHA-256 is Python's own; BLAKE3 comes
from the ``blake3`` wheel (the ``fast`` extra) and hashes about 4.7x faster on one core here
(1.1 GB/s against 5.2 GB/s, measured in docs/performance.md), which is what a conversion that
reads and writes at the disk's speed needs. New datasets use BLAKE3 where it is installed
(:func:`default_digest`; ``$PACKER_DIGEST`` names another); a dataset keeps its algorithm
across updates, so its unchanged shards keep their names.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from packer.errors import MissingExtraError, UnknownNameError
from packer.registry import Lazy, Registry

__all__ = ["DIGESTS", "DIGEST_VARIABLE", "LEGACY_DIGEST", "SHA256", "DigestAlgorithm", "Hasher",
           "default_digest", "digest_names", "get_digest"]

#: What a manifest without a ``digest`` was made with.
LEGACY_DIGEST: Final = "sha256"
#: The environment variable naming the algorithm of new datasets where no ``digest`` is given (a
#: site whose readers include packer before 0.4 sets ``sha256``; it reaches a conversion's workers,
#: subprocesses and Dask or Slurm jobs started from that environment alike).
DIGEST_VARIABLE: Final = "PACKER_DIGEST"
_CHUNK: Final = 1 << 20  # a file is hashed this much at a time, into one reused buffer


class Hasher(Protocol):
    """What a hash object offers (hashlib's and blake3's both do)."""

    def update(self, data: Any, /) -> Any: ...

    def digest(self) -> bytes: ...

    def hexdigest(self) -> str: ...


@dataclass(frozen=True)
class DigestAlgorithm:
    """One algorithm: its name (as manifests record it) and a factory of hash objects."""

    name: str
    new: Callable[[], Hasher]

    def of(self, data: bytes | bytearray | memoryview) -> bytes:
        """The digest of ``data`` (32 bytes for both built-ins)."""
        hasher = self.new()
        hasher.update(data)
        return hasher.digest()

    def hex(self, data: bytes | bytearray | memoryview) -> str:
        """The hex digest of ``data``."""
        return self.of(data).hex()

    def file(self, path: str) -> str:
        """The hex digest of a file's bytes, read into one reused buffer (no allocation per
        block; blocks stay in the CPU's cache between the copy and the hash)."""
        hasher = self.new()
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        with open(path, "rb", buffering=0) as handle:
            while count := handle.readinto(buffer):
                hasher.update(view[:count])
        return hasher.hexdigest()

    def __reduce__(self) -> tuple[Any, ...]:
        return (get_digest, (self.name,))  # pickled by name: a factory need not pickle


SHA256: Final = DigestAlgorithm("sha256", hashlib.sha256)

#: Digest algorithms by the name a manifest records.
DIGESTS: Registry[DigestAlgorithm] = Registry("digest algorithm", entry_points="packer.digests", builtins={
    "sha256": Lazy("packer.digests:SHA256"),
    "blake3": Lazy("packer.digest_blake3:BLAKE3", "fast"),
})


def get_digest(name: str) -> DigestAlgorithm:
    """The algorithm named ``name``.

    Raises:
        UnknownNameError: no such algorithm (the message lists them).
        MissingExtraError: ``blake3`` without its wheel (names the extra to install).
    """
    return DIGESTS.get(name)


def digest_names() -> tuple[str, ...]:
    """Every registered algorithm's name."""
    return DIGESTS.names()


def default_digest() -> str:
    """What a new dataset is hashed with when no ``digest`` is given: the algorithm
    ``$PACKER_DIGEST`` names, else ``blake3`` where its wheel is installed (``pip install
    'packer-shards[fast]'``), else ``sha256``. The choice is recorded in the dataset (and in a
    conversion's plan, which array tasks and resumes follow).

    Raises:
        UnknownNameError: ``$PACKER_DIGEST`` names no algorithm (the message lists them).
        MissingExtraError: it names ``blake3`` without its wheel installed.
    """
    named = os.environ.get(DIGEST_VARIABLE, "").strip()
    if named:
        try:
            return get_digest(named).name
        except (UnknownNameError, MissingExtraError) as err:
            raise type(err)(f"{err} (named by ${DIGEST_VARIABLE}={named!r}: name another, or unset it "
                            "for the default)") from None
    return "blake3" if importlib.util.find_spec("blake3") is not None else LEGACY_DIGEST
