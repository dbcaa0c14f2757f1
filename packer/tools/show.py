"""One sample of a packed dataset, looked at closely: ``packer show DST INDEX [-o FILE]``.

:func:`sample_info` says where sample ``INDEX`` came from (its relative path and class), how it
is stored (codec, bytes, shard) and what it is: width, height, mode and format of the stored
image (for ``pixels``, from the record's header). The dataset yields it as an RGB image of
that width and height (codecs never rotate). The stored bytes are decoded once, through the
dataset's codec, so a sample that cannot be read is reported rather than described. In a
dataset with fields, every field is decoded and described in a line (``fields``), and the image
is the first image field.
:func:`save_sample` writes the stored bytes, exactly, to a file.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from packer.errors import ManifestError, ShardError
from packer.format.codecs import get_codec
from packer.format.fields.stored import image_payload, stored_decoder
from packer.format.shardset import ShardSet
from packer.source.imagecheck import decoder_failures
from packer.store.durable import write_named_file
from packer.tools.fields_summary import describe_fields

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
    #: A dataset with fields: each in-record field's name and a line describing its value
    #: (``{"mask": "mask: 64x48 uint8, values [0, 1, 2]", ...}``); empty for an ImageFolder one.
    fields: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``packer show --json``); ``fields`` only for a dataset with fields,
        so an ImageFolder dataset's document is what it always was."""
        data = asdict(self)
        if not self.fields:
            del data["fields"]
        return data


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
    schema = manifest.schema
    labelled = schema.label_field() is not None
    if labelled and not 0 <= target < len(manifest.classes):
        raise ManifestError(f"Sample {position} of {shards.root!r} has the label {target}, but the dataset "
                            f"names {len(manifest.classes)} classes: its sample index is damaged; "
                            "run verify_dataset(), then convert it again.")
    relpath = samples.path(position)
    def damaged(err: Exception) -> ShardError:
        return ShardError(f"Sample {position} ({relpath}) of {shards.root!r} cannot be decoded with "
                          f"codec {manifest.codec!r} ({type(err).__name__}: {err}); the data is "
                          "damaged: run verify_dataset(deep=True).")

    codec = get_codec(manifest.codec, manifest.codec_params)
    fields: dict[str, str] = {}
    with decoder_failures(damaged):
        image = payload
        if not schema.is_imagefolder():
            values = stored_decoder(schema).decode(payload)
            fields = describe_fields(schema, values)
            image = image_payload(schema, payload)
        codec.decode(image)
        stored = codec.describe(image)
    width, height, mode, fmt = stored.width, stored.height, stored.mode, stored.format
    shard = manifest.shards[shards.locate(position)[0]].path
    info = SampleInfo(
        index=position, num_samples=manifest.num_samples, relpath=relpath, target=target,
        class_name=manifest.classes[target] if labelled else "", stored_bytes=len(payload), width=width,
        height=height, mode=mode, format=fmt, codec=manifest.codec, backend=manifest.backend, shard=shard,
        fields=fields)
    return info, payload if schema.is_imagefolder() else image


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
    """The stored bytes of sample ``index`` exactly (``ds[index]`` with ``decode=False``); in a
    dataset with fields, its (first) image field's stored bytes.

    Raises:
        PackerError: as :func:`sample_info` (and its IndexError).
    """
    return _load(dst, index)[1]


def save_sample(dst: str | os.PathLike[str], index: int, out: str | os.PathLike[str]) -> SampleInfo:
    """Write the stored bytes of sample ``index`` to ``out`` (replaced atomically); describe it.

    For the ``original`` codec that is the source file; for ``jpeg`` a JPEG file; for
    ``pixels`` the raw record (12-byte header, then RGB rows). In a dataset with fields, the
    image field's bytes (its other fields are in the returned info's ``fields``).

    Raises:
        OutputError: ``out`` cannot be written.
        PackerError: as :func:`sample_info` (and its IndexError).
    """
    info, payload = _load(dst, index)
    write_named_file(out, payload, "the sample")
    return info


