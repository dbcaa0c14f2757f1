"""The manifest's format versions: what each one may record, and which a new manifest gets.

Format 2 is a dataset of images and classes; 3 adds typed fields (``extra.schema``); 4 adds
checksums other than SHA-256 (``digest``). A packer refuses a newer format than it reads rather
than misread it, so each version marks something an older reader would get wrong.
"""

from __future__ import annotations

from typing import Final

from packer.digests import DIGESTS, LEGACY_DIGEST
from packer.errors import ManifestError

__all__ = ["DIGEST_FORMAT_VERSION", "FIELDS_FORMAT_VERSION", "FORMAT_VERSION", "LATEST_FORMAT_VERSION",
           "check_digest", "format_version_of"]

FORMAT_VERSION: Final = 2
#: The format of a dataset whose samples have fields other than ImageFolder's ``{image, label}``
#: (``extra.schema``): a packer that reads only format 2 refuses it rather than misreading it.
FIELDS_FORMAT_VERSION: Final = 3
#: The format of a dataset whose checksums are not SHA-256 (``digest``, :mod:`packer.digests`):
#: a packer that knows only SHA-256 refuses it rather than reporting every shard damaged.
DIGEST_FORMAT_VERSION: Final = 4
#: The newest format this packer reads.
LATEST_FORMAT_VERSION: Final = DIGEST_FORMAT_VERSION


def check_digest(digest: str, format_version: int, source: str) -> None:
    """A manifest (``source``) names a known digest algorithm, and one other than SHA-256 only
    from format 4.

    Raises:
        ManifestError: the algorithm is unknown here, or the format is too old for it.
    """
    if digest == LEGACY_DIGEST:
        return
    if format_version < DIGEST_FORMAT_VERSION:
        raise ManifestError(f"{source}: format version {format_version} cannot record the "
                            f"digest {digest!r} (format {DIGEST_FORMAT_VERSION} can); the "
                            "dataset is damaged: re-convert it.")
    if digest not in DIGESTS:
        raise ManifestError(f"{source}: its checksums are made with {digest!r}, which this "
                            f"packer does not know (it knows {', '.join(DIGESTS.names())}): upgrade "
                            "packer, or install the plugin that registers it.")


def format_version_of(digest: str, *, has_schema: bool) -> int:
    """The format a new manifest is written in: the oldest that can hold what it records."""
    if digest != LEGACY_DIGEST:
        return DIGEST_FORMAT_VERSION
    return FIELDS_FORMAT_VERSION if has_schema else FORMAT_VERSION
