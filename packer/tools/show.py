"""One sample of a packed dataset, looked at closely: ``packer show DST INDEX [-o FILE]``.

:func:`sample_info` says where sample ``INDEX`` came from (its relative path and class), how it
is stored (codec, bytes, shard) and what it is: width, height, mode and format of the stored
image (for ``pixels``, from the record's header). The dataset yields it as an RGB image of
that width and height (codecs never rotate). The stored bytes are decoded once, through the
dataset's codec, so a sample that cannot be read is reported rather than described.
:func:`save_sample` writes the stored bytes, exactly, to a file.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from packer.errors import ManifestError, ShardError
from packer.format.codecs import get_codec
from packer.format.shardset import ShardSet
from packer.source.imagecheck import decoder_failures
from packer.store.durable import write_named_file

__all__ = ["SampleInfo", "sample_bytes", "sample_info", "save_sample"]


@dataclass(frozen=True)
class SampleInfo:
    """What :func:`sample_info` reports about one sample."""

    index: int  # non-negative, even when a negative index was asked for
    num_samples: int
    relpath: str  # relative to the source tree, POSIX separators
    target: int
    class_name: str
    stored_bytes: int
    width: int
    height: int
    mode: str  # of the stored image (``L``, ``RGB``, ``CMYK``, ...); the dataset yields RGB
    format: str  # ``JPEG``, ``PNG``, ... or ``pixels`` (raw RGB rows)
    codec: str
    backend: str
    shard: str  # the shard file holding it, relative to DST

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``packer show --json``)."""
        return asdict(self)


def _resolve(index: int, num_samples: int, root: str) -> int:
    """``index`` as a position in ``range(num_samples)``, negative ones counting from the end."""
    resolved = index + num_samples if index < 0 else index
    if not 0 <= resolved < num_samples:
        valid = f"0 to {num_samples - 1}, or -{num_samples} to -1" if num_samples else "none"
        raise IndexError(f"sample index {index} is out of range: {root!r} has {num_samples} "
                         f"samples (valid: {valid})")
    return resolved


def _load(dst: str | os.PathLike[str], index: int) -> tuple[SampleInfo, bytes]:
    shards = ShardSet(dst)
    manifest = shards.manifest
    position = _resolve(int(index), manifest.num_samples, shards.root)
    try:
        payload = shards.read(position)
    finally:
        shards.close()
    samples = shards.index
    target = int(samples.targets[position])
    if not 0 <= target < len(manifest.classes):
        raise ManifestError(f"Sample {position} of {shards.root!r} has the label {target}, but the dataset "
                            f"names {len(manifest.classes)} classes: its sample index is damaged; "
                            "run verify_dataset(), then convert it again.")
    relpath = samples.path(position)
    def damaged(err: Exception) -> ShardError:
        return ShardError(f"Sample {position} ({relpath}) of {shards.root!r} cannot be decoded with "
                          f"codec {manifest.codec!r} ({type(err).__name__}: {err}); the data is "
                          "damaged: run verify_dataset(deep=True).")

    codec = get_codec(manifest.codec, manifest.codec_params)
    with decoder_failures(damaged):
        codec.decode(payload)
        stored = codec.describe(payload)
    width, height, mode, fmt = stored.width, stored.height, stored.mode, stored.format
    shard = manifest.shards[shards.locate(position)[0]].path
    info = SampleInfo(
        index=position, num_samples=manifest.num_samples, relpath=relpath, target=target,
        class_name=manifest.classes[target], stored_bytes=len(payload), width=width, height=height,
        mode=mode, format=fmt, codec=manifest.codec, backend=manifest.backend, shard=shard)
    return info, payload


def sample_info(dst: str | os.PathLike[str], index: int) -> SampleInfo:
    """Describe sample ``index`` of the packed dataset ``dst`` (negative counts from the end).

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError: ``dst`` is not a complete
            packer dataset.
        ShardError: a shard is missing or damaged, or the sample does not decode.
        IndexError: ``index`` is out of range; the message gives the valid range.
    """
    return _load(dst, index)[0]


def sample_bytes(dst: str | os.PathLike[str], index: int) -> bytes:
    """The stored bytes of sample ``index`` exactly (``ds[index]`` with ``decode=False``).

    Raises:
        PackerError: as :func:`sample_info` (and its IndexError).
    """
    return _load(dst, index)[1]


def save_sample(dst: str | os.PathLike[str], index: int, out: str | os.PathLike[str]) -> SampleInfo:
    """Write the stored bytes of sample ``index`` to ``out`` (replaced atomically); describe it.

    For the ``original`` codec that is the source file; for ``jpeg`` a JPEG file; for
    ``pixels`` the raw record (12-byte header, then RGB rows).

    Raises:
        OutputError: ``out`` cannot be written.
        PackerError: as :func:`sample_info` (and its IndexError).
    """
    info, payload = _load(dst, index)
    write_named_file(out, payload, "the sample")
    return info


