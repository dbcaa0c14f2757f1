"""BLAKE3 as a :class:`~packer.digests.DigestAlgorithm`, from the ``blake3`` wheel (the ``fast``
extra); importing this module without it raises ImportError, which the registry turns into the
``pip install`` line."""

from __future__ import annotations

from typing import Final

import blake3

from packer.digests import DigestAlgorithm

__all__ = ["BLAKE3"]

#: One thread per hash: conversions already hash in every worker process at once.
BLAKE3: Final = DigestAlgorithm("blake3", blake3.blake3)
