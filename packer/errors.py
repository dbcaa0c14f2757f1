"""The exceptions packer raises, as one small tree::

    PackerError                          root: catch this to catch anything packer raises
    ├── SourceError                      the input tree cannot be used
    │   ├── SourceNotFoundError          SRC does not exist or is no directory (+FileNotFoundError)
    │   ├── EmptySourceError             no class folders, or a class without images (+FileNotFoundError)
    │   ├── BadImageError                a file could not be packed (``strict``); ``path``, ``reason``
    │   └── SourceChangedError           ``upgrade()``: SRC no longer gives DST's samples; ``differing``
    ├── OutputError                      DST cannot be written as asked (read-only, disk full, ...)
    │   ├── OutputExistsError            DST is not empty, and neither resume nor overwrite (+FileExistsError)
    │   ├── ShardWriteError              a shard could not be written: disk full, read-only, I/O
    │   │                                error (+OSError: ``errno`` says which; ``path``)
    │   ├── ResumeError                  ``resume`` asked, but DST holds another source's or options' run
    │   ├── MissingShardsError           ``merge``: planned shards missing or damaged; ``missing`` names them
    │   └── DatasetBusyError             another process writes DST (holds its lease); names it
    ├── ConversionError                  a conversion worker failed (killed, crashed, a bug)
    │   └── ConversionInterrupted        Ctrl-C; finished shards are kept for ``resume=True``
    ├── UnsafeKeyError                   a path from data leads outside its place (``..``, absolute,
    │                                    control characters); ``key``, ``source`` (+ValueError)
    ├── SchemaError                      a sample schema (or a value for it) that cannot be (+ValueError)
    ├── UnknownNameError                 unknown backend, codec, engine, source or store scheme;
    │                                    lists the choices (+LookupError)
    ├── MissingExtraError                an optional dependency is missing; names the extra (+ImportError)
    ├── DatasetError                     DST cannot be read as a packer dataset
    │   ├── NotADatasetError             no manifest and no sign of packer (+FileNotFoundError)
    │   ├── IncompleteDatasetError       a conversion into DST started and never finished
    │   ├── ManifestError                index.json is malformed or from a newer packer
    │   ├── ShardError                   a shard file is missing, damaged or cannot be read
    │   └── VersionGoneError             a reader's pinned version was removed by ``collect_garbage()``
    └── StoreError                       where a dataset lives (a URL, the node cache) fails us
        ├── ObjectNotFoundError          a URL's object or prefix is missing (+FileNotFoundError)
        │   └── BucketNotFoundError      the bucket (container) itself does not exist
        ├── AccessDeniedError            credentials missing, wrong or refused (+PermissionError)
        ├── StoreUnavailableError        the store kept failing (5xx, throttling, timeouts, resets)
        │                                past the retry limit
        ├── IntegrityError               fetched bytes differ from the recorded size or digest, twice
        └── CacheError                   the node cache cannot hold what a read needs (+OSError)

Every message says what happened, which path, and what to do about it, in the library's terms:
an option is named as its keyword (``resume=True``), a function by its name (``update()``); the
command line translates both to its flags and commands when it prints an error. Each kind of
mistake has one family: whatever fails to write DST (a shard writer's full disk included) is an
:class:`OutputError`, whatever fails to read it a :class:`DatasetError`. Programming errors (a
wrong argument type, an index out of range) stay builtins.

Every exception here pickles and unpickles as itself, with its fields and notes, so an error
raised in a worker process (local or on a cluster) reaches the caller with its own type.
"""

from __future__ import annotations

from typing import Any, ClassVar

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
    "SchemaError",
    "ShardError",
    "ShardWriteError",
    "SourceChangedError",
    "SourceError",
    "SourceNotFoundError",
    "UnknownNameError",
    "UnsafeKeyError",
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
    #: The keyword-only fields the constructor takes after the message (pickled by name).
    _fields: ClassVar[tuple[str, ...]] = ()

    def __reduce__(self) -> tuple[Any, ...]:
        # The default pickles ``args`` only, so keyword-only fields (and an OSError's errno)
        # would be lost or fail to unpickle: rebuild from the message and the fields.
        fields = {name: getattr(self, name) for name in self._fields}
        state = {key: value for key, value in vars(self).items() if key not in fields}
        return (_rebuild, (type(self), self.args[0] if self.args else "", fields), state or None)


def _rebuild(cls: type[PackerError], message: str, fields: dict[str, Any]) -> PackerError:
    """Unpickle a :class:`PackerError` (see its ``__reduce__``)."""
    return cls(message, **fields)


class SourceError(PackerError):
    """The source ImageFolder tree cannot be used."""


class SourceNotFoundError(SourceError, FileNotFoundError):
    """SRC does not exist or is not a directory."""


class EmptySourceError(SourceError, FileNotFoundError):
    """SRC has no class folders, a class folder holds no image, or every item is skipped
    (a conversion that would pack nothing stops: :mod:`packer.conversion.outcome`)."""


class BadImageError(SourceError):
    """One source file cannot be packed; raised instead of skipping it under ``strict``."""

    _fields = ("path", "reason")

    def __init__(self, message: str, *, path: str, reason: str) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


class SourceChangedError(SourceError):
    """SRC no longer gives the samples of the dataset ``upgrade()`` was asked to upgrade.

    ``differing`` names the first (up to 1000) files that differ, in sample order, each as
    ``"path (what)"``; ``count`` is how many differ in all. Nothing was written.
    """

    _fields = ("differing", "count")

    def __init__(self, message: str, *, differing: list[str], count: int) -> None:
        super().__init__(message)
        self.differing = differing
        self.count = count


class OutputError(PackerError):
    """The destination cannot be written as asked."""


class OutputExistsError(OutputError, FileExistsError):
    """DST exists and is not empty, and overwriting was not asked for."""

    exit_code = 3


class ShardWriteError(OutputError, OSError):
    """A shard file could not be written: the disk is full, read-only, or failed (I/O error).

    Also an :class:`OSError` whose ``errno`` is the cause's (``errno.ENOSPC`` for a full disk;
    None when the storage library did not say); ``path`` is the file being written.
    """

    _fields = ("errno", "path")

    def __init__(self, message: str, *, errno: int | None = None, path: str = "") -> None:
        super().__init__(message)
        self.errno = errno  # set after: OSError reads an errno only from several arguments
        self.path = path


class ResumeError(OutputError):
    """``resume`` was asked, but DST holds a run of another source tree or other options."""


class MissingShardsError(OutputError):
    """``merge`` found planned shards missing, unfinished or damaged (``missing``: their names)."""

    _fields = ("missing",)

    def __init__(self, message: str, *, missing: list[str]) -> None:
        super().__init__(message)
        self.missing = missing


class DatasetBusyError(OutputError):
    """Another process writes DST (a conversion, merge, update, gc or push holds its lease, or
    array tasks run); the message names it: command, host, pid, since and until when."""


class ConversionError(PackerError):
    """A conversion worker failed: killed (out of memory?), crashed, or hit a bug."""


class ConversionInterrupted(ConversionError):
    """The conversion was interrupted (Ctrl-C); the shards finished so far are kept."""

    exit_code = 130


class UnsafeKeyError(PackerError, ValueError):
    """A path that comes from data (a manifest, an archive member, a list file, a label that
    becomes a folder, a remote listing) is not a safe relative key: refused before anything is
    read, written or uploaded through it (:mod:`packer.keys`). ``key`` is the path as given,
    ``source`` the file or URL that holds it."""

    _fields = ("key", "source")

    def __init__(self, message: str, *, key: str, source: str) -> None:
        super().__init__(message)
        self.key = key
        self.source = source


class SchemaError(PackerError, ValueError):
    """A schema of sample fields that cannot be: a bad field name, an unknown type, a reference
    to a missing field, bad parameters. The message names the field and the fix."""


class UnknownNameError(PackerError, LookupError):
    """A name that is not registered (backend, codec, engine, source kind, store scheme)."""


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
    """A shard file is missing, damaged, or cannot be read (writing one fails with
    :class:`ShardWriteError`)."""


class VersionGoneError(DatasetError):
    """The version a reader opened was removed by ``collect_garbage()`` before the reader
    reopened it."""


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
