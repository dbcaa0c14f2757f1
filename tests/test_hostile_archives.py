"""Hostile archives and tables: damage the archive's own checks catch, members that claim or
expand to absurd sizes, spools that would not fit, and names that climb out of the archive.
Whatever the input, a conversion either refuses it with one clear error or ends with every image
packed byte-exact or listed as skipped with its reason, and no member, cell or spool ever costs
more than ``max_bytes`` (plus a little) of memory or disk.
"""

from __future__ import annotations

import gzip
import io
import shutil
import struct
import tarfile
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from imagetools import image_bytes, png_bytes
from parquet_tools import Row, write_table
from sourcekinds import add_member, flip_bytes, truncate

import packer
from packer.cli import cli
from packer.conversion.options import ConversionOptions
from packer.errors import EmptySourceError, SourceError
from packer.format.backends import Backend
from packer.source.archive.members import TRUNCATED
from packer.source.archive.source import ArchiveSource
from packer.source.archive.spool import SPOOL_ENV, ensure_spool
from packer.source.archive.tarindex import index_tar
from packer.source.base import SourceItem, SourceOptions
from packer.source.limits import DEFAULT_MAX_BYTES
from packer.source.parquet.source import ParquetSource
from packer.source.sourcefile import SKIP_REASONS, UnpackableFile

MiB = 1 << 20


@pytest.fixture(autouse=True)
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Decompressed copies of .tar.gz archives go under the test's own folder."""
    folder = tmp_path / "spool"
    monkeypatch.setenv(SPOOL_ENV, str(folder))
    return folder


# -- making archives ---------------------------------------------------------------------------------


def images(count: int = 6, ext: str = ".bmp") -> dict[str, bytes]:
    """``count`` small images in the classes ``a`` and ``b``, in ImageFolder order (BMPs by
    default: no checksum of their own, so only the archive's check can catch a flipped byte)."""
    return {f"{'ab'[i * 2 // count]}/{i:02d}{ext}": image_bytes(ext, 10, 8, i) for i in range(count)}


def tar_bytes(members: dict[str, bytes], *, end: bool = True) -> bytes:
    """An uncompressed GNU tar of ``members`` (without its end-of-archive marker unless ``end``)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members.items():
            add_member(tar, name, data)
    data = buffer.getvalue()
    return data if end else data[:_last_member_end(data)]


def _last_member_end(data: bytes) -> int:
    """Where the last member's (padded) data ends in the tar ``data``."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        last = tar.getmembers()[-1]
    return last.offset_data + -(-last.size // 512) * 512


def claiming(name: str, size: int) -> bytes:
    """A header for a member ``name`` that claims ``size`` bytes (pax for more than 8 GiB)."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime = size, 1_700_000_000
    return info.tobuf(tarfile.PAX_FORMAT if size >= 8 << 30 else tarfile.GNU_FORMAT)


def gzip_member(data: bytes, *, level: int = 6, bad: str | None = None) -> bytes:
    """``data`` as one gzip member; ``bad``: ``"crc"`` or ``"isize"`` spoils that trailer field."""
    packed = bytearray(gzip.compress(data, compresslevel=level, mtime=0))
    if bad == "crc":
        packed[-8] ^= 0xFF
    elif bad == "isize":
        packed[-4] ^= 0x01
    return bytes(packed)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def convert(src: Path, dst: Path, backend: str = "lmdb", **options: Any) -> packer.ConversionResult:
    return packer.convert(src, dst, to=backend, shard_size="3KB", workers=1, **options)


def outcome(dst: Path) -> tuple[dict[str, bytes], dict[str, str], list[str]]:
    """What DST holds: packed bytes by path, skip reasons by path, the scan's notes."""
    dataset = packer.open_dataset(dst, decode=False)
    packed = {path: dataset[i][0] for i, (path, _) in enumerate(dataset.samples)}
    manifest = dataset.manifest
    notes = manifest.extra["source"]["report"].get("notes", [])
    return packed, {s.path: s.reason for s in manifest.skipped}, notes


def assert_nothing_lost(dst: Path, members: dict[str, bytes]) -> tuple[dict[str, bytes], dict[str, str]]:
    """Every image is packed byte-exact or skipped (with a known reason), and counts add up."""
    packed, skipped, _ = outcome(dst)
    assert set(packed) | set(skipped) == set(members) and not set(packed) & set(skipped)
    assert all(packed[path] == members[path] for path in packed)
    assert set(skipped.values()) <= set(SKIP_REASONS)
    return packed, skipped


# -- 1. a gzip stream whose own check fails ------------------------------------------------------------


@pytest.mark.parametrize("bad", ["crc", "isize", "data"])
def test_a_tar_gz_failing_its_gzip_check_lists_its_members_as_corrupt(tmp_path: Path, any_backend: Backend,
                                                                      bad: str) -> None:
    members = images()
    tar = tar_bytes(members)
    if bad == "data":  # stored deflate blocks: a flipped pixel decompresses fine, only the CRC tells
        packed = bytearray(gzip_member(tar, level=0))
        at = packed.index(members["b/04.bmp"][-20:])
        packed[at] ^= 0xFF
        archive = write(tmp_path / "bad.tar.gz", bytes(packed))
    else:
        archive = write(tmp_path / "bad.tar.gz", gzip_member(tar, bad=bad))
    # every member is corrupt: nothing would be packed, so the conversion stops and writes no dataset
    plan = packer.plan_conversion(archive, to=any_backend.name)
    assert plan.known_skips == {"corrupt_member": len(members)} and plan.would_stop is not None
    assert any("gzip check" in note and "bad.tar.gz" in note for note in plan.report.notes), plan.report.notes
    with pytest.raises(EmptySourceError, match=f"corrupt_member {len(members)}"):
        convert(archive, tmp_path / "dst", any_backend.name, check="full")
    assert not (tmp_path / "dst" / "index.json").exists()


def test_only_the_members_a_bad_gzip_member_covers_are_corrupt(tmp_path: Path) -> None:
    members = images(8)
    tar = tar_bytes(members)
    with tarfile.open(fileobj=io.BytesIO(tar)) as opened:
        split = opened.getmember("b/05.bmp").offset_data + 7  # the second stream starts inside b/05
    archive = write(tmp_path / "two.tar.gz", gzip_member(tar[:split]) + gzip_member(tar[split:], bad="crc"))
    convert(archive, tmp_path / "dst")
    packed, skipped = assert_nothing_lost(tmp_path / "dst", members)
    assert sorted(packed) == sorted(members)[:5]
    assert skipped == dict.fromkeys(sorted(members)[5:], "corrupt_member")


def test_a_tar_gz_whose_deflate_data_breaks_keeps_what_precedes_it(tmp_path: Path) -> None:
    """The index and the spool read the stream with different read sizes, yet agree on where
    it breaks: no member the index took as whole is missing from the spool."""
    members = images(60)
    tar = tar_bytes(members)
    with tarfile.open(fileobj=io.BytesIO(tar)) as opened:
        split = opened.getmember("b/45.bmp").offset_data + 100
    deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(tar[:split]) + deflate.flush(zlib.Z_FULL_FLUSH) + b"\x07" + b"\xa5" * 4096
    header = gzip_member(b"")[:10]
    archive = write(tmp_path / "broken.tar.gz", header + body)
    convert(archive, tmp_path / "dst")
    got, skipped, notes = outcome(tmp_path / "dst")
    assert got and all(got[path] == members[path] for path in got)
    assert list(skipped.values()) == ["corrupt_member"]
    assert list(got) + list(skipped) == list(members)[:len(got) + 1]
    assert any("damaged compressed data" in note for note in notes)


def test_a_good_multi_member_gzip_reads_whole(tmp_path: Path) -> None:
    members = images(8)
    tar = tar_bytes(members)
    archive = write(tmp_path / "two.tar.gz", gzip_member(tar[:3000]) + gzip_member(tar[3000:]) + b"\0" * 9)
    convert(archive, tmp_path / "dst")
    packed, skipped = assert_nothing_lost(tmp_path / "dst", members)
    assert packed == members and not skipped


# -- 2. bounded memory: zip bombs, Parquet cells ----------------------------------------------------------


def zip_with(members: dict[str, bytes], path: Path, *, level: int = 9) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=level) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def lie_about_size(path: Path, name: str, size: int) -> None:
    """Make the zip at ``path`` say member ``name`` holds ``size`` bytes (local and central headers)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, info.header_offset + 22, size)
    central = data.index(b"PK\x01\x02")
    while data[central + 46:central + 46 + len(name)] != name.encode():
        central = data.index(b"PK\x01\x02", central + 4)
    struct.pack_into("<I", data, central + 24, size)
    path.write_bytes(bytes(data))


def test_a_zip_bomb_is_skipped_as_too_large_and_nothing_else_is_lost(tmp_path: Path,
                                                                      any_backend: Backend) -> None:
    members = images(4, ".png")
    bomb = b"\0" * (8 * MiB)
    archive = zip_with({**members, "a/bomb.png": bomb}, tmp_path / "bomb.zip")
    assert archive.stat().st_size < 64 * 1024
    convert(archive, tmp_path / "dst", any_backend.name, max_bytes="1MiB")
    packed, skipped, _ = outcome(tmp_path / "dst")
    assert packed == members and skipped == {"a/bomb.png": "too_large"}
    detail = packer.open_dataset(tmp_path / "dst").manifest.skipped[0].detail
    assert "max_bytes" in detail


def _peak_of(call: Callable[[], object]) -> int:
    """The most Python memory ``call`` held at once (bytes), whatever it raises."""
    tracemalloc.start()
    try:
        call()
    except (UnpackableFile, SourceError):
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def _archive_item(source: ArchiveSource, relpath: str) -> SourceItem:
    return next(item for item in source.scan().items if item.relpath == relpath)


def test_reading_a_zip_bomb_holds_no_more_than_the_bound(tmp_path: Path) -> None:
    archive = zip_with({**images(2, ".png"), "a/bomb.png": b"\0" * (48 * MiB)}, tmp_path / "bomb.zip")
    source = ArchiveSource(str(archive), SourceOptions(max_bytes=MiB))
    item = _archive_item(source, "a/bomb.png")
    assert item.size <= MiB + 1  # planned as at most the bound: no map or plan is sized by the claim
    reader = source.reader()
    with pytest.raises(UnpackableFile, match="too_large"):
        reader.read(item)
    assert _peak_of(lambda: reader.read(item)) < MiB // 4


def test_a_zip_member_that_expands_past_its_declared_size_stops_there(tmp_path: Path) -> None:
    archive = zip_with({**images(2, ".png"), "a/liar.png": b"\0" * (48 * MiB)}, tmp_path / "liar.zip")
    lie_about_size(archive, "a/liar.png", 1000)
    source = ArchiveSource(str(archive), SourceOptions())
    item = _archive_item(source, "a/liar.png")
    reader = source.reader()
    with pytest.raises(UnpackableFile, match="corrupt_member"):
        reader.read(item)
    assert _peak_of(lambda: reader.read(item)) < 4 * MiB  # not the 48 MiB it expands to


def test_a_zip_claiming_an_absurd_size_plans_nothing_absurd(tmp_path: Path, any_backend: Backend) -> None:
    members = images(4, ".png")
    archive = zip_with({**members, "b/huge.png": png_bytes(5, 5, 9)}, tmp_path / "claim.zip")
    lie_about_size(archive, "b/huge.png", 0xFFFFFFFF - 1)
    convert(archive, tmp_path / "dst", any_backend.name)
    packed, skipped, _ = outcome(tmp_path / "dst")
    assert packed == members and skipped == {"b/huge.png": "too_large"}


def _parquet_with_a_big_cell(tmp_path: Path, size: int) -> tuple[Path, dict[str, bytes]]:
    members = {f"a/{i}.png": png_bytes(6, 6, i) for i in range(3)}
    rows = [Row(path, data, 0) for path, data in members.items()]
    rows.insert(1, Row("a/big.png", b"\0" * size, 0))
    return write_table(tmp_path / "t.parquet", rows, classes=["a"]), members


def test_a_parquet_cell_over_the_bound_is_skipped_as_too_large(tmp_path: Path, any_backend: Backend) -> None:
    path, members = _parquet_with_a_big_cell(tmp_path, 4 * MiB)
    convert(path, tmp_path / "dst", any_backend.name, max_bytes=MiB)
    packed, skipped, _ = outcome(tmp_path / "dst")
    assert packed == members and skipped == {"a/big.png": "too_large"}


def test_reading_a_big_parquet_cell_never_copies_it(tmp_path: Path) -> None:
    path, _ = _parquet_with_a_big_cell(tmp_path, 16 * MiB)
    source = ParquetSource(str(path), SourceOptions(max_bytes=MiB))
    item = next(i for i in source.scan().items if i.relpath == "a/big.png")
    reader = source.reader()
    assert reader.known_skip(item) == "too_large"
    with pytest.raises(UnpackableFile, match="too_large"):
        reader.read(item)
    assert _peak_of(lambda: reader.read(item)) < MiB


def test_the_bound_is_an_option_recorded_only_when_changed() -> None:
    assert ConversionOptions(to="lmdb").max_bytes == DEFAULT_MAX_BYTES == 256 * MiB
    assert "max_bytes" not in ConversionOptions(to="lmdb").recorded()
    options = ConversionOptions(to="lmdb", max_bytes="1MiB")
    assert options.max_bytes == MiB and options.recorded()["max_bytes"] == MiB
    assert ConversionOptions.from_recorded(options.recorded()).recorded() == options.recorded()
    assert ConversionOptions(**options.keywords()).recorded() == options.recorded()
    assert options.source_options.max_bytes == MiB  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="max_bytes"):
        ConversionOptions(to="lmdb", max_bytes=0)


def test_the_cli_takes_max_bytes_as_a_size(tmp_path: Path) -> None:
    members = images(4, ".png")
    archive = zip_with({**members, "a/bomb.png": b"\0" * (2 * MiB)}, tmp_path / "bomb.zip")
    result = CliRunner().invoke(cli, ["convert", str(archive), str(tmp_path / "dst"), "--to", "lmdb",
                                      "--max-bytes", "1MiB", "--workers", "1", "-q"])
    assert result.exit_code == 0, result.output
    assert outcome(tmp_path / "dst")[1] == {"a/bomb.png": "too_large"}
    result = CliRunner().invoke(cli, ["convert", str(archive), str(tmp_path / "x"), "--to", "lmdb",
                                      "--max-bytes", "lots"])
    assert result.exit_code == 2 and "invalid size" in result.output


# -- 3. the spool: disk space it needs, and no member spooled beyond the bound ----------------------------


def test_a_spool_that_would_not_fit_is_refused_naming_the_space_it_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    members = images(4, ".png")
    tar = tar_bytes({**members, "a/zeros.txt": b"\0" * (4 * MiB)})
    archive = write(tmp_path / "big.tar.gz", gzip_member(tar))
    assert archive.stat().st_size < 64 * 1024
    real = shutil.disk_usage

    def little(path: str) -> Any:
        found = real(path)
        return type(found)(found.total, found.used, 2 * MiB)  # more than the archive, less than its tar

    monkeypatch.setattr("packer.source.archive.spool.shutil.disk_usage", little)
    # The spool is made where the archive is first read: in this process, as a conversion's
    # worker would (a conversion may spawn its workers, which would not see the patch).
    stat = archive.stat()
    with pytest.raises(SourceError) as caught:
        ensure_spool(str(archive), stat.st_size, stat.st_mtime_ns, expanded=len(tar))
    message = str(caught.value)
    assert "big.tar.gz" in message and "MiB" in message and "free" in message
    assert not list((tmp_path / "spool").glob("*.tar"))


@pytest.mark.parametrize("layout", ["one gzip member", "a big one, then a small one"])
def test_a_spool_made_without_a_scan_checks_its_estimate_and_again_as_it_grows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    tar = tar_bytes({"a/zeros.txt": b"\0" * (4 * MiB), "a/00.png": png_bytes(4, 4, 0)})
    parts = [tar] if layout == "one gzip member" else [tar[:-4096], tar[-4096:]]  # ISIZE says 4 KiB
    archive = write(tmp_path / "x.tar.gz", b"".join(gzip_member(part) for part in parts))
    real = shutil.disk_usage
    monkeypatch.setattr("packer.source.archive.spool.shutil.disk_usage",
                        lambda path: type(real(path))(real(path).total, real(path).used, 2 * MiB))
    stat = archive.stat()
    with pytest.raises(SourceError, match=r"x\.tar\.gz.*it needs"):
        ensure_spool(str(archive), stat.st_size, stat.st_mtime_ns)
    assert not list((tmp_path / "spool").glob("*.tar"))


@pytest.mark.parametrize("free", [0, 3 * MiB], ids=["none", "less than it grows to"])
def test_a_scan_short_of_space_spools_nothing_and_the_reader_says_so(
        tmp_path: Path, spool: Path, monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    """The scan writes the spool as it decompresses; out of space it stops writing it (no
    error, nothing left behind), and the reader's own spool gives the clear error."""
    tar = tar_bytes({"a/zeros.txt": b"\0" * (4 * MiB), "a/00.png": png_bytes(4, 4, 0),
                     "b/01.png": png_bytes(4, 4, 1)})
    archive = write(tmp_path / "short.tar.gz", gzip_member(tar[:-4096]) + gzip_member(tar[-4096:]))
    real = shutil.disk_usage
    monkeypatch.setattr("packer.source.archive.spool.shutil.disk_usage",
                        lambda path: type(real(path))(real(path).total, real(path).used, free))
    with ArchiveSource(str(archive), SourceOptions()) as source:
        index = source.scan()
        assert [item.relpath for item in index.items] == ["a/00.png", "b/01.png"]
        assert not [p for p in spool.glob("*") if not p.name.endswith(".lock")]
        with pytest.raises(SourceError, match=r"short\.tar\.gz.*it needs"):
            source.reader().read(index.items[0])


def test_a_member_over_the_bound_is_not_spooled(tmp_path: Path, spool: Path) -> None:
    members = images(4, ".png")
    tar = tar_bytes({"a/00.png": members["a/00.png"], "a/huge.png": b"\7" * (32 * MiB),
                     **{k: v for k, v in members.items() if k != "a/00.png"}})
    archive = write(tmp_path / "bomb.tar.gz", gzip_member(tar))
    with ArchiveSource(str(archive), SourceOptions(max_bytes=MiB)) as source:
        index = source.scan()
        reader = source.reader()
        got = {item.relpath: reader.read(item) for item in index.items if item.relpath != "a/huge.png"}
        assert got == members
        with pytest.raises(UnpackableFile, match="too_large"):
            reader.read(_archive_item(source, "a/huge.png"))
        made = list(spool.glob("*.tar"))
        assert len(made) == 1 and made[0].stat().st_blocks * 512 < 4 * MiB  # a hole where it lies
    assert not list(spool.glob("*.tar"))


def test_a_spool_with_holes_is_never_reused_by_a_larger_bound(tmp_path: Path, spool: Path) -> None:
    members = {"a/00.png": png_bytes(5, 5, 0), "a/mid.png": png_bytes(400, 400, 1),
               "b/01.png": png_bytes(5, 5, 2)}
    archive = write(tmp_path / "x.tar.gz", gzip_member(tar_bytes(members)))
    small = ArchiveSource(str(archive), SourceOptions(max_bytes=64 * 1024))
    small_reader = small.reader()
    small_reader.read(_archive_item(small, "a/00.png"))  # spooled with a hole where a/mid.png lies
    large = ArchiveSource(str(archive), SourceOptions())
    assert large.reader().read(_archive_item(large, "a/mid.png")) == members["a/mid.png"]
    small.close()
    large.close()
    assert not list(spool.glob("*.tar"))


# -- 4. absurd size claims --------------------------------------------------------------------------------


@pytest.mark.parametrize("claim", [1 << 33, 1 << 40, 1 << 62])
@pytest.mark.parametrize("compressed", [False, True], ids=["tar", "tar.gz"])
def test_a_member_claiming_an_absurd_size_is_skipped_and_the_rest_packed(
        tmp_path: Path, any_backend: Backend, claim: int, compressed: bool) -> None:
    members = images(4, ".png")
    tar = tar_bytes(members, end=False) + claiming("b/claim.png", claim) + png_bytes(7, 7, 7)
    name = "claim.tar.gz" if compressed else "claim.tar"
    archive = write(tmp_path / name, gzip_member(tar) if compressed else tar)
    convert(archive, tmp_path / "dst", any_backend.name)
    packed, skipped, notes = outcome(tmp_path / "dst")
    assert packed == members and skipped == {"b/claim.png": "truncated"}
    assert any("b/claim.png" in note for note in notes)
    item = _archive_item(ArchiveSource(str(archive), SourceOptions()), "b/claim.png")
    assert item.size <= len(tar)


@pytest.mark.parametrize("compressed", [False, True], ids=["tar", "tar.gz"])
def test_a_claim_past_what_a_seek_can_reach_is_cut_to_the_archive(tmp_path: Path, compressed: bool) -> None:
    tar = tar_bytes(images(2, ".png"), end=False) + claiming("b/claim.png", 1 << 100) + b"x" * 100
    archive = write(tmp_path / "c.tar", gzip_member(tar) if compressed else tar)
    listing, _ = index_tar(str(archive), compressed=compressed)
    claim = listing.members[-1]
    assert (claim.name, claim.status, claim.offset + claim.size) == ("b/claim.png", TRUNCATED, len(tar))


@pytest.mark.parametrize("compressed", [False, True], ids=["tar", "tar.gz"])
def test_a_member_claiming_a_negative_size_ends_the_walk_with_a_note(tmp_path: Path,
                                                                      compressed: bool) -> None:
    members = images(4, ".png")
    header = bytearray(claiming("b/negative.png", 0))
    header[124:136] = b"\xff" * 12  # GNU base-256: -1
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    tar = tar_bytes(members, end=False) + bytes(header) + png_bytes(7, 7, 7)
    name = "neg.tar.gz" if compressed else "neg.tar"
    archive = write(tmp_path / name, gzip_member(tar) if compressed else tar)
    convert(archive, tmp_path / "dst")
    packed, skipped, notes = outcome(tmp_path / "dst")
    assert packed == members and not skipped
    assert any("ends early" in note and "-1 bytes" in note for note in notes)


# -- 5. names outside the archive ---------------------------------------------------------------------------


def test_zip_members_named_outside_the_archive_are_noted_like_tar_members(tmp_path: Path) -> None:
    members = images(4, ".png")
    outside = {"../evil.png": png_bytes(3, 3, 1), "a/../../evil2.png": png_bytes(3, 3, 2)}
    zipped = zip_with({**members, **outside}, tmp_path / "names.zip")
    with tarfile.open(tmp_path / "names.tar", "w") as tar:
        for name, data in {**members, **outside}.items():
            add_member(tar, name, data)
    for archive in (zipped, tmp_path / "names.tar"):
        dst = tmp_path / f"dst-{archive.suffix[1:]}"
        convert(archive, dst)
        packed, skipped, notes = outcome(dst)
        assert packed == members and not skipped
        assert f"{str(archive)!r}: 2 member(s) named outside the archive (with '..') were ignored." in notes
        assert not (tmp_path / "evil.png").exists()


def test_absolute_member_names_read_the_same_from_a_zip_and_a_tar(tmp_path: Path) -> None:
    members = {"/a/00.png": png_bytes(4, 4, 0), "b/01.png": png_bytes(4, 4, 1)}
    zipped = tmp_path / "abs.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name), data)
    with tarfile.open(tmp_path / "abs.tar", "w") as tar:
        for name, data in members.items():
            add_member(tar, name, data)
    got = []
    for archive in (zipped, tmp_path / "abs.tar"):
        convert(archive, tmp_path / f"dst-{archive.suffix[1:]}")
        got.append(outcome(tmp_path / f"dst-{archive.suffix[1:]}")[:2])
    assert got[0] == got[1] == ({"a/00.png": members["/a/00.png"], "b/01.png": members["b/01.png"]}, {})


# -- regressions: what was already safe stays safe -----------------------------------------------------------


def test_tar_traversal_and_link_members_touch_nothing_outside(tmp_path: Path, any_backend: Backend) -> None:
    members = images(4, ".png")
    (tmp_path / "secret.png").write_bytes(png_bytes(2, 2, 9))
    with tarfile.open(tmp_path / "links.tar", "w") as tar:
        for name, data in members.items():
            add_member(tar, name, data)
        add_member(tar, "../escape.png", png_bytes(3, 3, 3))
        for name, kind, target in (("a/up.png", tarfile.SYMTYPE, "../../secret.png"),
                                   ("a/abs.png", tarfile.SYMTYPE, str(tmp_path / "secret.png")),
                                   ("b/hard.png", tarfile.LNKTYPE, "../secret.png")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tar.addfile(info)
    convert(tmp_path / "links.tar", tmp_path / "dst", any_backend.name)
    packed, skipped, notes = outcome(tmp_path / "dst")
    assert packed == members
    assert skipped == dict.fromkeys(("a/up.png", "a/abs.png", "b/hard.png"), "not_a_regular_file")
    assert any("1 member(s) named outside the archive" in note for note in notes)
    assert not (tmp_path / "escape.png").exists()


def test_a_pixel_bomb_in_an_archive_is_skipped(tmp_path: Path, any_backend: Backend) -> None:
    members = images(4, ".png")
    header = bytearray(png_bytes(4, 4, 0))
    struct.pack_into(">II", header, 16, 30_000, 30_000)  # IHDR width and height, CRC fixed below
    struct.pack_into(">I", header, 29, zlib.crc32(bytes(header[12:29])))
    archive = zip_with({**members, "b/bomb.png": bytes(header)}, tmp_path / "pixels.zip")
    convert(archive, tmp_path / "dst", any_backend.name)
    packed, skipped = assert_nothing_lost(tmp_path / "dst", {**members, "b/bomb.png": bytes(header)})
    assert skipped == {"b/bomb.png": "decompression_bomb"}


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "zip"])
def test_a_truncated_archive_keeps_what_precedes_the_cut(tmp_path: Path, kind: str) -> None:
    members = images(6, ".png")
    if kind == "zip":
        archive = zip_with(members, tmp_path / "cut.zip", level=0)
    else:
        tar = tar_bytes(members)
        archive = write(tmp_path / f"cut.{kind}", gzip_member(tar, level=0) if kind == "tar.gz" else tar)
    truncate(archive, archive.read_bytes().index(members["b/04.png"][40:60]))
    convert(archive, tmp_path / "dst")
    packed, skipped, notes = outcome(tmp_path / "dst")
    assert packed == {k: members[k] for k in sorted(members)[:4]}
    assert skipped == {"b/04.png": "truncated"} and notes


def test_a_bad_zip_crc_is_a_corrupt_member(tmp_path: Path, any_backend: Backend) -> None:
    members = images(4)
    archive = zip_with(members, tmp_path / "crc.zip", level=0)
    with zipfile.ZipFile(archive) as opened:
        info = opened.getinfo("b/03.bmp")
    flip_bytes(archive, info.header_offset + 30 + len("b/03.bmp") + info.compress_size // 2, 1)
    convert(archive, tmp_path / "dst", any_backend.name)
    packed, skipped = assert_nothing_lost(tmp_path / "dst", members)
    assert skipped == {"b/03.bmp": "corrupt_member"}
    assert len(packed) == 3
