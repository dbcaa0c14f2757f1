"""The exceptions packer raises, as one small tree::

    PackerError                          root: catch this to catch anything packer raises
    ├── SourceError                      the input tree cannot be used
    │   ├── SourceNotFoundError          SRC does not exist or is no directory (+FileNotFoundError)
    │   ├── EmptySourceError             no class folders, or a class without images (+FileNotFoundError)
    │   └── BadImageError                a file could not be packed (``strict``); ``path``, ``reason``
    ├── OutputError                      DST cannot be written as asked (read-only, disk full, ...)
    │   ├── OutputExistsError            DST is not empty, and neither resume nor overwrite (+FileExistsError)
    │   ├── ResumeError                  ``resume`` asked, but DST holds another source's or options' run
    │   ├── MissingShardsError           ``merge``: planned shards missing or damaged; ``missing`` names them
    │   └── DatasetBusyError             another ``update`` or ``gc`` holds DST's lock
    ├── ConversionError                  a conversion worker failed (killed, crashed, a bug)
    │   └── ConversionInterrupted        Ctrl-C; finished shards are kept for ``--resume``
    ├── UnknownNameError                 unknown backend or codec; lists the choices (+LookupError)
    ├── MissingExtraError                an optional dependency is missing; names the extra (+ImportError)
    ├── DatasetError                     DST cannot be read as a packer dataset
    │   ├── NotADatasetError             no manifest and no sign of packer (+FileNotFoundError)
    │   ├── IncompleteDatasetError       a conversion into DST started and never finished
    │   ├── ManifestError                index.json is malformed or from a newer packer
    │   ├── ShardError                   a shard file is missing, damaged or failed to write
    │   └── VersionGoneError             a reader's pinned version was removed by ``gc``
    └── StoreError                       where a dataset lives (a URL, the node cache) fails us
        ├── ObjectNotFoundError          a URL's object or prefix is missing (+FileNotFoundError)
        │   └── BucketNotFoundError      the bucket (container) itself does not exist
        ├── AccessDeniedError            credentials missing, wrong or refused (+PermissionError)
        ├── StoreUnavailableError        the store kept failing (5xx, throttling, timeouts, resets)
        │                                past the retry limit
        ├── IntegrityError               fetched bytes differ from the recorded size or digest, twice
        └── CacheError                   the node cache cannot hold what a read needs (+OSError)

Every message says what happened, which path, and what to do about it. Programming errors
(a wrong argument type, an index out of range) stay builtins.
"""

from __future__ import annotations

__all__ = [
    "BadImageError",
    "ConversionError",
    "ConversionInterrupted",
    "DatasetBusyError",
    "DatasetError",
    "EmptySourceError",
    "IncompleteDatasetError",
    "ManifestError",
    "MissingExtraError",
    "MissingShardsError",
    "NotADatasetError",
    "OutputError",
    "OutputExistsError",
    "PackerError",
    "ResumeError",
    "ShardError",
    "SourceError",
    "SourceNotFoundError",
    "UnknownNameError",
    "VersionGoneError",
    "StoreError",
    "ObjectNotFoundError",
    "BucketNotFoundError",
    "AccessDeniedError",
    "StoreUnavailableError",
    "IntegrityError",
    "CacheError",
]


class PackerError(Exception):
    """Root of every error packer raises on purpose.

    ``exit_code`` is what the command line exits with when this error ends a command.
    """

    exit_code: int = 1


class SourceError(PackerError):
    """The source ImageFolder tree cannot be used."""


class SourceNotFoundError(SourceError, FileNotFoundError):
    """SRC does not exist or is not a directory."""


class EmptySourceError(SourceError, FileNotFoundError):
    """SRC has no class folders, or a class folder holds no image."""


class BadImageError(SourceError):
    """One source file cannot be packed; raised instead of skipping it under ``strict``."""

    def __init__(self, message: str, *, path: str, reason: str) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


class OutputError(PackerError):
    """The destination cannot be written as asked."""


class OutputExistsError(OutputError, FileExistsError):
    """DST exists and is not empty, and overwriting was not asked for."""

    exit_code = 3


class ResumeError(OutputError):
    """``resume`` was asked, but DST holds a run of another source tree or other options."""


class MissingShardsError(OutputError):
    """``merge`` found planned shards missing, unfinished or damaged (``missing``: their names)."""

    def __init__(self, message: str, *, missing: list[str]) -> None:
        super().__init__(message)
        self.missing = missing

    def __reduce__(self) -> tuple[object, ...]:  # keyword-only fields: pickle by hand
        return (_rebuild_missing_shards, (str(self), self.missing))


class DatasetBusyError(OutputError):
    """Another ``packer update`` or ``packer gc`` is running on DST (it holds DST's lock)."""


def _rebuild_missing_shards(message: str, missing: list[str]) -> MissingShardsError:
    return MissingShardsError(message, missing=missing)


class ConversionError(PackerError):
    """A conversion worker failed: killed (out of memory?), crashed, or hit a bug."""


class ConversionInterrupted(ConversionError):
    """The conversion was interrupted (Ctrl-C); the shards finished so far are kept."""

    exit_code = 130


class UnknownNameError(PackerError, LookupError):
    """A backend or codec name that is not registered."""


class MissingExtraError(PackerError, ImportError):
    """An optional feature's dependency is missing; the message names ``pip install`` extra."""


class DatasetError(PackerError):
    """A directory cannot be read as a packer dataset."""


class NotADatasetError(DatasetError, FileNotFoundError):
    """The directory holds no manifest and no sign of a packer conversion."""


class IncompleteDatasetError(DatasetError):
    """A conversion into this directory started and never wrote its manifest."""


class ManifestError(DatasetError):
    """The manifest is malformed, inconsistent, or written by a newer packer."""


class ShardError(DatasetError):
    """A shard file is missing, damaged, or could not be written."""


class VersionGoneError(DatasetError):
    """The version a reader opened was removed by ``packer gc`` before the reader reopened it."""


class StoreError(PackerError):
    """Where a dataset's bytes live (an object store, an HTTP server, the node cache) failed."""


class ObjectNotFoundError(StoreError, FileNotFoundError):
    """A URL's object, prefix or bucket does not exist."""


class BucketNotFoundError(ObjectNotFoundError):
    """The bucket (or container) a URL names does not exist."""


class AccessDeniedError(StoreError, PermissionError):
    """The store refused the credentials (or found none)."""


class StoreUnavailableError(StoreError):
    """The store kept failing with transient faults (5xx, throttling, timeouts, dropped
    connections) past the retry limit."""


class IntegrityError(StoreError):
    """Fetched bytes differ from the size or digest recorded at conversion, even fetched again."""


class CacheError(StoreError, OSError):
    """The node cache cannot hold what a read needs (its disk is full, or below its floor)."""
