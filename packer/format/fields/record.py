"""One sample's record: its fields' stored bytes in one value, so a sample is one range of its
shard (remote reads stay one request per sample).

Layout of a record with several fields (little-endian)::

    b"PKR1"  u16 n  u32 length[n]  payload[0] ... payload[n-1]

the payloads in the schema's record order. A schema with one field in the record (an
ImageFolder dataset: the image) stores that payload alone, byte for byte what packer always
wrote, so format-2 shards and ImageFolder conversions are unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

__all__ = ["MAGIC", "pack_record", "unpack_record"]

MAGIC: Final = b"PKR1"
_COUNT: Final = struct.Struct("<H")


def pack_record(payloads: Sequence[bytes]) -> bytes:
    """The record of a sample whose in-record fields stored ``payloads`` (in schema order)."""
    if len(payloads) == 1:
        return bytes(payloads[0])
    lengths = struct.pack(f"<{len(payloads)}I", *(len(p) for p in payloads))
    return b"".join([MAGIC, _COUNT.pack(len(payloads)), lengths, *payloads])


def unpack_record(record: bytes | memoryview, count: int) -> list[memoryview]:
    """The ``count`` payloads of ``record`` (views into it, nothing copied).

    Raises:
        ValueError: the record is not a record of ``count`` fields (damaged, or another
            schema's); the caller names the shard.
    """
    view = memoryview(record)
    if count == 1:
        return [view]
    if len(view) < 4 + _COUNT.size or bytes(view[:4]) != MAGIC:
        raise ValueError(f"not a packer record of {count} fields (bad header)")
    (stored,) = _COUNT.unpack_from(view, 4)
    if stored != count:
        raise ValueError(f"a record of {stored} fields where the schema has {count}")
    head = 4 + _COUNT.size + 4 * count
    if len(view) < head:
        raise ValueError(f"not a packer record of {count} fields (its lengths are cut off)")
    lengths = struct.unpack_from(f"<{count}I", view, 4 + _COUNT.size)
    if head + sum(lengths) != len(view):
        raise ValueError(f"field lengths add up to {head + sum(lengths)} bytes, the record holds {len(view)}")
    out, at = [], head
    for length in lengths:
        out.append(view[at:at + length])
        at += length
    return out
