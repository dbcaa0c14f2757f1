"""One table of item statuses: every source's statuses are the shared module's, each skipping
status names a manifest skip reason, and a status never reaches a byte on disk (a Parquet
row's identity still hashes the number it was first written with)."""

from __future__ import annotations

from pathlib import Path

from parquet_tools import Row, write_table

from packer.source import statuses
from packer.source.archive import members
from packer.source.base import SourceOptions
from packer.source.parquet import schema
from packer.source.parquet.read import digest_of
from packer.source.parquet.source import ParquetSource
from packer.source.sourcefile import SKIP_REASONS


def test_archive_and_parquet_statuses_are_the_shared_table_s() -> None:
    for name in ("OK", "MISSING_IMAGE", "TOO_LARGE", "EMPTY"):
        assert getattr(schema, name) == getattr(statuses, name), name
    for name in ("OK", "TRUNCATED", "CORRUPT", "NOT_REGULAR", "MISSING", "MISSING_IMAGE", "MISSING_LABEL",
                 "TOO_LARGE"):
        assert getattr(members, name) == getattr(statuses, name), name
    assert members.MISSING_IMAGE == schema.MISSING_IMAGE and members.OK == schema.OK
    assert members.STATUS_REASONS is statuses.STATUS_REASONS
    assert schema.LABEL_CODES == statuses.LABEL_STATUSES


def test_archive_status_numbers_are_kept() -> None:
    assert (statuses.OK, statuses.TRUNCATED, statuses.CORRUPT, statuses.NOT_REGULAR, statuses.MISSING,
            statuses.MISSING_IMAGE, statuses.MISSING_LABEL, statuses.TOO_LARGE) == tuple(range(8))


def test_every_status_is_distinct_and_skips_with_a_manifest_reason() -> None:
    codes = [value for name, value in vars(statuses).items() if name.isupper() and isinstance(value, int)]
    assert len(codes) == len(set(codes))
    assert set(statuses.STATUS_REASONS.values()) <= set(SKIP_REASONS)
    assert statuses.skip_reason(statuses.OK) is None and statuses.skip_reason(statuses.FROM_FILE) is None
    assert statuses.skip_reason(statuses.NEGATIVE_LABEL) == "missing_label"


def test_a_label_less_row_s_identity_hashes_its_first_number(tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 8
    path = write_table(tmp_path / "t.parquet", [Row("a/0.png", png, 0), Row("a/1.png", png, None),
                                                Row("a/2.png", png, -1)], classes=None)
    items = ParquetSource(str(path), SourceOptions()).scan().items
    digest = digest_of(png)
    # 3: no label, 4: negative, as packer hashed them before statuses were shared
    assert items[1].mtime_ns == digest_of(b"%d|%d|%d" % (3, 0, digest))
    assert items[2].mtime_ns == digest_of(b"%d|%d|%d" % (4, -1, digest))
