"""A sample's record: several fields' payloads in one value, one range per sample; a one-field
record is the payload itself (an ImageFolder dataset's records are unchanged)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from packer.format.fields.record import MAGIC, pack_record, unpack_record


def test_one_field_is_the_payload_itself() -> None:
    assert pack_record([b"\xff\xd8jpeg"]) == b"\xff\xd8jpeg"
    assert [bytes(v) for v in unpack_record(b"\xff\xd8jpeg", 1)] == [b"\xff\xd8jpeg"]


@given(st.lists(st.binary(max_size=64), min_size=2, max_size=8))
def test_payloads_round_trip_in_order(payloads: list[bytes]) -> None:
    record = pack_record(payloads)
    assert record.startswith(MAGIC)
    assert [bytes(v) for v in unpack_record(record, len(payloads))] == payloads
    assert pack_record(payloads) == record  # deterministic


def test_views_copy_nothing() -> None:
    record = bytearray(pack_record([b"abc", b"defg"]))
    first, _ = unpack_record(record, 2)
    record[-5] = ord("X")  # the last byte of "abc"
    assert bytes(first) == b"abX"


@pytest.mark.parametrize("damage", ["truncated", "extended", "magic", "count", "lengths"])
def test_a_damaged_record_is_refused(damage: str) -> None:
    record = bytearray(pack_record([b"abc", b"defg", b""]))
    if damage == "truncated":
        record = record[:-1]
    elif damage == "extended":
        record += b"x"
    elif damage == "magic":
        record[0:4] = b"XXXX"
    elif damage == "count":
        record[4:6] = struct.pack("<H", 4)
    else:
        record[6:10] = struct.pack("<I", 1 << 31)  # a length far past the record: no allocation
    with pytest.raises(ValueError):
        unpack_record(bytes(record), 3)


def test_a_record_of_another_field_count_is_refused() -> None:
    with pytest.raises(ValueError, match="2 fields where the schema has 3"):
        unpack_record(pack_record([b"a", b"b"]), 3)
    with pytest.raises(ValueError, match="bad header"):
        unpack_record(b"short", 2)


def test_a_field_that_does_not_fit_is_skipped_as_a_bad_file_is() -> None:
    from packer.format.fields.base import FieldValueError
    from packer.source.sourcefile import UnpackableFile

    err = FieldValueError("mask_size", "the mask is 4x4, its image 8x8")
    assert isinstance(err, UnpackableFile)
    assert (err.reason, err.detail) == ("mask_size", "the mask is 4x4, its image 8x8")
    with pytest.raises(ValueError, match="unknown skip reason"):
        FieldValueError("made_up", "")
