"""Byte sizes as people write them."""

from __future__ import annotations

import pytest

from packer.sizes import format_size, parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("512MB", 512_000_000),
    ("1GiB", 2**30),
    ("1GB", 10**9),
    ("1.5G", 1_500_000_000),
    ("64KiB", 65_536),
    ("2 mib", 2 * 2**20),
    (" 10kb ", 10_000),
    ("1TB", 10**12),
    ("3TiB", 3 * 2**40),
    ("1000000", 1_000_000),
    ("7b", 7),
    ("7B", 7),
    (1234, 1234),
])
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", [
    "", "   ", "abc", "MB", "12XB", "1.5.2GB", "-5MB", "-1", "0", "0GB", "1e9", "1 G B", "0.1",
    "GiB1", 0, -7,
])
def test_parse_size_rejects(bad: str | int) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(bad)


def test_error_shows_accepted_forms() -> None:
    with pytest.raises(ValueError, match="512MB, 1GiB"):
        parse_size("huge")


@pytest.mark.parametrize(("num", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (2**30, "1.0 GiB"),
    (5 * 2**40, "5.0 TiB"), (2**50, "1024.0 TiB"),
])
def test_format_size(num: int, text: str) -> None:
    assert format_size(num) == text
