"""A dataset written by packer 0.1 (format 1) next to its source: what :func:`packer.upgrade` checks.

Format 1 recorded the conversion's options only in part and nothing about the source files
but their paths, labels and skip reasons. :func:`legacy_options` rebuilds the options from
the manifest; :func:`structural_differences` compares the dataset's samples and skipped files
with a scan of SRC (paths, classes, labels, order); :func:`read_source` reads every source
file once, hashing it (its identity from now on) and, for a file that was skipped, checking
that it still cannot be packed; :func:`content_differences` compares the hashes with the
stored payloads' (:func:`stored_records`, read once from the shards) where the codec stores the
source bytes. :func:`refuse` turns the differences into the error that names them.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from packer.conversion.options import ConversionOptions
from packer.errors import ManifestError, OutputError, SourceChangedError, SourceError
from packer.format.backends import Backend
from packer.format.codecs import Codec
from packer.format.manifest import MANIFEST_NAME, Manifest, ShardEntry
from packer.format.records import RECORD_COLUMNS, digest64, digest_prefix, shard_records
from packer.source.base import ItemReader, SourceIndex, SourceItem
from packer.source.sourcefile import UnpackableFile

__all__ = ["SourceRead", "content_differences", "legacy_options", "read_source", "refuse",
           "stored_records", "structural_differences"]

#: A difference between the dataset and SRC: ``(relative path, what differs)``.
Difference = tuple[str, str]
#: How many differences an error message names, and how many it carries.
_NAMED, _CARRIED = 5, 1000
#: Source items handed to the reading threads at a time.
_BATCH = 4096


def legacy_options(manifest: Manifest, path: str, *,
                   is_valid_file: Callable[[str], bool] | None) -> ConversionOptions:
    """The options the format-1 dataset at ``path`` was converted with.

    0.1 recorded all of them but ``allow_empty``, which is taken as on when the dataset has a
    class without any file (packed or skipped): a conversion without it refuses such a class.

    Raises:
        ManifestError: the manifest lacks the shard size every 0.1 dataset records.
        OutputError: the dataset was not converted from a folder tree (0.1 converted nothing
            else), or with an ``is_valid_file`` filter that was not given (or one was given
            for a dataset converted without).
    """
    shard_size = manifest.extra.get("shard_size")
    if not isinstance(shard_size, int) or isinstance(shard_size, bool):
        raise ManifestError(f"{path}/{MANIFEST_NAME} lacks extra.shard_size, which every dataset "
                            "of packer 0.1 records: it is damaged. Convert its source again with "
                            "convert(src, dst, overwrite=True).")
    if manifest.scan.filter not in ("extensions", "is_valid_file"):
        raise OutputError(f"{path!r} was converted from a {manifest.scan.filter} source, but packer "
                          "0.1 converted only folder trees: convert its source again with "
                          "convert(src, dst, overwrite=True).")
    with_files = {relpath.split("/", 1)[0] for relpath in (skip.path for skip in manifest.skipped)}
    allow_empty = any(count == 0 and name not in with_files
                      for name, count in zip(manifest.classes, manifest.class_counts, strict=True))
    recorded = {"backend": manifest.backend, "codec": manifest.codec, "codec_params": manifest.codec_params,
                "check": manifest.check, "max_pixels": manifest.max_pixels, "shard_size": shard_size,
                "include_hidden": manifest.scan.include_hidden, "allow_empty": allow_empty,
                "filter": manifest.scan.filter}
    try:
        return ConversionOptions.from_recorded(recorded, is_valid_file=is_valid_file)
    except ValueError as err:
        raise OutputError(f"Cannot upgrade {path!r}: {err}.") from err


def structural_differences(manifest: Manifest, paths: Sequence[str], targets: Sequence[int],
                           index: SourceIndex) -> list[Difference]:
    """Classes and files added to or removed from SRC, then (when there are none) samples whose
    class or place in the sample order changed; ``paths`` and ``targets`` are the dataset's
    samples."""
    packed, skipped = set(paths), {skip.path for skip in manifest.skipped}
    now = {item.relpath: item for item in index.items}
    found = [(f"{name}/", "class added") for name in index.classes if name not in manifest.classes]
    found += [(f"{name}/", "class removed") for name in manifest.classes if name not in index.classes]
    found += [(item.relpath, "added") for item in index.items
              if item.relpath not in packed and item.relpath not in skipped]
    found += [(relpath, "removed") for relpath in (*paths, *(s.path for s in manifest.skipped))
              if relpath not in now]
    if found:
        return found
    if tuple(index.classes) != tuple(manifest.classes):  # the same names, sorted otherwise
        return [(f"{name}/", f"class {i} now, was {manifest.classes.index(name)}")
                for i, name in enumerate(index.classes) if manifest.classes[i] != name]
    for relpath, target in zip(paths, targets, strict=True):
        then, label_now = manifest.classes[target], index.classes[now[relpath].label]
        if label_now != then:
            found.append((relpath, f"in class {label_now!r}, was {then!r}"))
    order = [item.relpath for item in index.items if item.relpath in packed]
    if not found and order != list(paths):
        first = next(i for i, (a, b) in enumerate(zip(order, paths, strict=True)) if a != b)
        found.append((paths[first], f"sample {first} now comes after other files than it did"))
    return found


@dataclass(frozen=True, slots=True)
class SourceRead:
    """One source item as read once: its SHA-256 (empty when it could not be read) and, when it
    cannot be packed, why."""

    digest: bytes
    unpackable: UnpackableFile | None = None

    @property
    def short(self) -> int:
        """The digest's first 8 bytes as a signed int64 (``samples/sources``' third column)."""
        return digest_prefix(self.digest) if self.digest else 0


def read_source(index: SourceIndex, reader: ItemReader, skipped: set[str], options: ConversionOptions,
                *, workers: int, advance: Callable[[int], object]) -> list[SourceRead]:
    """Read every item of ``index`` once, in ``workers`` threads (hashing releases the GIL),
    trying to pack again only those in ``skipped`` (cheap: the others were packed).

    Raises:
        SourceError: a file could not be read (an I/O error); the message says it was upgrade.
    """
    codec: Codec = options.stored_as

    def one(item: SourceItem) -> SourceRead:
        try:
            data = reader.read(item)
        except UnpackableFile as err:
            read = SourceRead(b"", err)
        except SourceError as err:
            cause = err.__cause__ or err
            raise SourceError(f"Reading {reader.where(item.relpath)!r} failed while upgrade() compared "
                              f"it with the dataset ({cause}); nothing was changed: fix the source, then "
                              "run upgrade(src, dst) again.") from err
        else:
            read = SourceRead(hashlib.sha256(data).digest())
            if item.relpath in skipped:
                try:
                    codec.encode(data, check=options.check, max_pixels=options.max_pixels)
                except UnpackableFile as err:
                    read = SourceRead(read.digest, err)
        advance(1)
        return read

    reads: list[SourceRead] = []
    with ThreadPoolExecutor(max(workers, 1), thread_name_prefix="packer-upgrade") as pool:
        for start in range(0, len(index.items), _BATCH):  # a bounded number of futures at a time
            reads.extend(pool.map(one, index.items[start:start + _BATCH]))
    return reads


def content_differences(index: SourceIndex, reads: Sequence[SourceRead], skipped: set[str],
                        stored: np.ndarray | None) -> list[Difference]:
    """Files that became packable or unpackable, and, given ``stored`` (each packed sample's
    payload digest, as ``samples/records`` holds it, for a codec that stores source bytes),
    packed files whose bytes changed."""
    found: list[Difference] = []
    sample = 0
    for item, read in zip(index.items, reads, strict=True):
        if item.relpath in skipped:
            if read.unpackable is None:
                found.append((item.relpath, "can be packed now, was skipped"))
            continue
        if read.unpackable is not None:
            found.append((item.relpath, f"cannot be packed now ({read.unpackable.reason})"))
        elif stored is not None and int(stored[sample]) != read.short:
            found.append((item.relpath, "changed"))
        sample += 1
    return found


def refuse(src: str, dst: str, found: Sequence[Difference]) -> SourceChangedError:
    """The error naming the first differences, for ``upgrade()`` to raise."""
    named = ", ".join(f"{relpath} ({what})" for relpath, what in found[:_NAMED])
    more = f" and {len(found) - _NAMED} more" if len(found) > _NAMED else ""
    return SourceChangedError(
        f"{src!r} no longer gives the samples of {dst!r}: {len(found)} file(s) differ: "
        f"{named}{more}. Nothing was changed. Give upgrade() the source the dataset was converted "
        "from, as it was then; or convert the source as it is now with "
        "convert(src, dst, overwrite=True).",
        differing=[f"{relpath} ({what})" for relpath, what in found[:_CARRIED]], count=len(found))


def stored_records(path: str, backend: Backend, shards: Sequence[ShardEntry], *, workers: int,
                   advance: Callable[[int], object], payloads: bool) -> np.ndarray | None:
    """The records array of DST's shards (offset, length, digest of each payload), read in
    ``workers`` threads; where the backend cannot locate records, only the digests (offset and
    length -1) when ``payloads`` asks for them, else None."""
    if backend.ranges is None and not payloads:
        advance(sum(shard.num_samples for shard in shards))
        return None

    def one(shard: ShardEntry) -> np.ndarray:
        full = os.path.join(path, shard.path)
        if backend.ranges is not None:
            rows = shard_records(backend, full, shard.num_samples)
        else:
            rows = np.full((shard.num_samples, RECORD_COLUMNS), -1, dtype=np.int64)
            reader = backend.reader(full, shard.num_samples)
            try:
                for local in range(shard.num_samples):
                    rows[local, 2] = digest64(reader.read(local))
            finally:
                reader.close()
        advance(shard.num_samples)
        return rows

    if not shards:
        return np.zeros((0, RECORD_COLUMNS), dtype=np.int64)
    with ThreadPoolExecutor(max(1, min(workers, len(shards))), thread_name_prefix="packer-upgrade") as pool:
        return np.concatenate(list(pool.map(one, shards)))
