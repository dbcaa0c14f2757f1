"""Plain tar headers read without tarfile give tarfile's listing exactly.

The walk reads plain headers with :class:`PlainHeaders` and everything else with tarfile; with
``READ_PLAIN_HEADERS`` off, tarfile reads every header: that is the reference. Every archive here
(GNU, ustar, pax, v7; long names, ustar prefixes, links, devices, global pax headers, non-ASCII
names, tars of tars, kept members) and hundreds of damaged copies of them (a byte flipped in a
header, cut anywhere) index to the same listing and kept bytes both ways.
"""

from __future__ import annotations

import gzip
import io
import random
import tarfile
from pathlib import Path

import pytest

from packer.source.archive import tarwalk
from packer.source.archive.members import Listing
from packer.source.archive.tarheaders import SMALL_SPAN, PlainHeaders
from packer.source.archive.tarindex import index_tar


def _info(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mtime, info.mode = size, kind, 1_600_000_000 + len(name), 0o644
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def _tar(path: Path, form: int, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w", format=form) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def _mixed(seed: int) -> list[tuple[tarfile.TarInfo, bytes]]:
    """Members of every kind a walk meets, sizes from 0 bytes to past a small span."""
    rng = random.Random(seed)
    members: list[tuple[tarfile.TarInfo, bytes]] = [(_info("a", kind=tarfile.DIRTYPE), b"")]
    for i in range(12):
        data = rng.randbytes(rng.choice([0, 1, 511, 512, 513, 3000, SMALL_SPAN + 100]))
        members.append((_info(f"a/{i:02d}.jpg", len(data)), data))
    deep = "/".join(["folder"] * 14) + "/image.png"  # ustar: a prefix; GNU: a long name
    members += [(_info(deep, 5), b"12345"), (_info("a/süß.jpg", 3), b"abc"),
                (_info("a/link", kind=tarfile.SYMTYPE, linkname="00.jpg"), b""),
                (_info("a/hard", kind=tarfile.LNKTYPE, linkname="a/01.jpg"), b""),
                (_info("a/dev", kind=tarfile.CHRTYPE, devmajor=1, devminor=3), b""),
                (_info("a/fifo", kind=tarfile.FIFOTYPE), b""), (_info("v7/", kind=tarfile.AREGTYPE), b""),
                (_info("./a//b/./c.txt", 2), b"hi"), (_info("../outside.jpg", 1), b"x"),
                (_info("a/after.jpg", 700), rng.randbytes(700))]
    return members


def _both(path: Path, monkeypatch: pytest.MonkeyPatch, **options: object) -> tuple[object, object]:
    """The index of ``path`` with plain headers read without tarfile, and with tarfile alone."""
    results = []
    for plain in (True, False):
        monkeypatch.setattr(tarwalk, "READ_PLAIN_HEADERS", plain)
        try:
            results.append(index_tar(str(path), **options))  # type: ignore[arg-type]
        except Exception as err:  # noqa: BLE001  # the same refusal both ways is the same answer
            results.append((type(err), str(err)))
    return results[0], results[1]


@pytest.mark.parametrize("form", [tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT])
def test_every_format_indexes_as_tarfile_reads_it(tmp_path: Path, form: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    members = _mixed(form)
    if form != tarfile.USTAR_FORMAT:
        members.append((_info("a/" + "x" * 150 + ".jpg", 4), b"long"))
    path = _tar(tmp_path / "a.tar", form, members)
    fast, reference = _both(path, monkeypatch)
    assert fast == reference
    listing = fast[0]  # type: ignore[index]
    assert isinstance(listing, Listing)
    names = [m.name for m in listing.members]
    assert "a/11.jpg" in names and "a/b/c.txt" in names and "a/after.jpg" in names
    assert not any(".." in name for name in names) and any("1 member(s)" in n for n in listing.notes)


def test_plain_headers_are_read_without_tarfile(tmp_path: Path) -> None:
    """A GNU tar of regular files and folders is plain through and through: the reader gives
    every member tarfile lists, with its data offset, size and mtime."""
    members = [(_info(f"c/{i}.jpg", i * 100), bytes(i * 100)) for i in range(50)]
    path = _tar(tmp_path / "g.tar", tarfile.GNU_FORMAT, [(_info("c", kind=tarfile.DIRTYPE), b""), *members])
    data = path.read_bytes()
    headers = PlainHeaders(lambda at, count: data[at:at + count], "utf-8", "surrogateescape")
    found = headers.read(0, len(data))
    with tarfile.open(path) as tar:
        expected = [(t.name, "dir" if t.isdir() else "file", t.offset_data, t.size, t.mtime) for t in tar]
    assert [header[:5] for header in found] == expected
    assert headers.read(found[-1][-1], len(data)) == []  # the end marker: tarfile's to read


def test_the_end_marker_and_extension_headers_are_left_to_tarfile(tmp_path: Path) -> None:
    member = (_info("a/1.jpg", 3, pax_headers={"x": "y"}), b"abc")
    path = _tar(tmp_path / "p.tar", tarfile.PAX_FORMAT, [member])
    data = path.read_bytes()
    headers = PlainHeaders(lambda at, count: data[at:at + count], "utf-8", "surrogateescape")
    assert headers.read(0, len(data)) == []  # a pax header first: tarfile's


def test_large_members_are_not_read_whole(tmp_path: Path) -> None:
    """Past a small span a header costs a 512-byte read: a tar of large images is never read."""
    members = [(_info(f"big/{i}.jpg", 1 << 20), bytes(1 << 20)) for i in range(8)]
    path = _tar(tmp_path / "big.tar", tarfile.GNU_FORMAT, members)
    data = path.read_bytes()
    read: list[int] = []

    def read_at(at: int, count: int) -> bytes:
        read.append(count)
        return data[at:at + count]
    found = PlainHeaders(read_at, "utf-8", "surrogateescape").read(0, len(data))
    assert len(found) == 8 and sum(read) < 2 << 20  # the first window, then a header a read


def test_a_tar_of_tars_indexes_as_tarfile_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outer = []
    for c in range(3):
        inner = _tar(tmp_path / f"n{c}.tar", tarfile.GNU_FORMAT, _mixed(c)[:10])
        outer.append((_info(f"n{c}.tar", inner.stat().st_size), inner.read_bytes()))
    path = _tar(tmp_path / "train.tar", tarfile.GNU_FORMAT, outer)
    fast, reference = _both(path, monkeypatch, workers=1)
    assert fast == reference and len(fast[0].inner) == 3  # type: ignore[index]


def test_kept_members_are_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    members = _mixed(7)
    path = _tar(tmp_path / "k.tar", tarfile.GNU_FORMAT, members)
    fast, reference = _both(path, monkeypatch, keep=lambda name, size: size < 1000)
    assert fast == reference and fast[1]  # type: ignore[index]


def _headers(data: bytes) -> list[int]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [info.offset for info in tar]


@pytest.mark.parametrize("form", [tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT])
def test_damaged_headers_index_as_tarfile_reads_them(tmp_path: Path, form: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A byte of a header set to what tarfile's checks look at (a digit, a NUL, a space, high
    bits, a type), with the checksum fixed up or not: the same listing and notes both ways."""
    source = _tar(tmp_path / "base.tar", form, _mixed(form + 10)).read_bytes()
    starts = _headers(source)
    rng = random.Random(form)
    for trial in range(120):
        data = bytearray(source)
        header = rng.choice(starts)
        spot = header + rng.choice([rng.randrange(512), rng.randrange(100, 160), 124, 135, 147, 154, 156,
                                    345])
        data[spot] = rng.choice([0, 0x20, 0x30, 0x37, 0x38, 0x80, 0xFF, ord("x"), ord("5"), ord("L"),
                                 ord("g"), ord("S"), ord("\n"), ord("-"), rng.randrange(256)])
        if trial % 2:  # a consistent header: the checksum passes, the field itself is what is odd
            block = data[header:header + 512]
            block[148:156] = b" " * 8
            data[header + 148:header + 156] = b"%06o\0 " % sum(block)
        path = tmp_path / f"d{trial}.tar"
        path.write_bytes(bytes(data))
        fast, reference = _both(path, monkeypatch)
        assert fast == reference, (trial, spot, data[spot])


def test_cut_archives_index_as_tarfile_reads_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _tar(tmp_path / "base.tar", tarfile.GNU_FORMAT, _mixed(3)).read_bytes()
    rng = random.Random(3)
    cuts = sorted({*range(0, len(source), 512), *(rng.randrange(len(source)) for _ in range(40))})
    for cut in cuts[::3]:
        path = tmp_path / "cut.tar"
        path.write_bytes(source[:cut])
        fast, reference = _both(path, monkeypatch)
        assert fast == reference, cut


def test_a_global_pax_header_hands_the_rest_to_tarfile(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(_info("a/0.jpg", 1), io.BytesIO(b"0"))
    first = buffer.getvalue()[:1024]  # a plain member, then a global header and members after it
    glob = io.BytesIO()
    with tarfile.open(fileobj=glob, mode="w", format=tarfile.PAX_FORMAT,
                      pax_headers={"mtime": "7.25"}) as tar:
        for i in range(3):
            tar.addfile(_info(f"a/{i + 1}.jpg", 2), io.BytesIO(b"xy"))
    path = tmp_path / "g.tar"
    path.write_bytes(first + glob.getvalue())
    fast, reference = _both(path, monkeypatch)
    assert fast == reference
    assert [m.mtime_ns for m in fast[0].members][1:] == [7_250_000_000] * 3  # type: ignore[index]


@pytest.mark.parametrize("compressed", [False, True])
def test_a_kept_hard_link_keeps_its_targets_bytes(tmp_path: Path, compressed: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """tarfile's extractfile cannot find a link's target in a walk that keeps no TarInfo: the
    walk reads the target's bytes itself."""
    members = [(_info("s/0.txt", 5), b"hello"),
               (_info("s/1.txt", kind=tarfile.LNKTYPE, linkname="s/0.txt"), b"")]
    path = _tar(tmp_path / "l.tar", tarfile.GNU_FORMAT, members)
    if compressed:
        path = tmp_path / "l.tar.gz"
        path.write_bytes(gzip.compress((tmp_path / "l.tar").read_bytes()))
    fast, reference = _both(path, monkeypatch, compressed=compressed, keep=lambda name, size: True)
    assert fast == reference
    listing, contents = fast  # type: ignore[misc]
    assert [m.name for m in listing.members] == ["s/0.txt", "s/1.txt"]
    assert contents == {0: b"hello", 1: b"hello"}


def test_a_negative_size_ends_the_walk_as_with_tarfile(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray(_tar(tmp_path / "base.tar", tarfile.GNU_FORMAT,
                          [(_info(f"n/{i}.jpg", 10), bytes(10)) for i in range(3)]).read_bytes())
    header = _headers(bytes(data))[1]
    data[header + 124:header + 136] = b"-0000000001\0"
    block = data[header:header + 512]
    block[148:156] = b" " * 8
    data[header + 148:header + 156] = b"%06o\0 " % sum(block)
    path = tmp_path / "negative.tar"
    path.write_bytes(bytes(data))
    fast, reference = _both(path, monkeypatch)
    assert fast == reference
    assert [m.name for m in fast[0].members] == ["n/0.jpg"]  # type: ignore[index]
