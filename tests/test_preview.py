"""Contact sheets (``packer preview``): grid geometry, the right image in the right cell, HTML."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import MakeTree
from imagetools import STANDARD_IMAGES, image_bytes, rgb_of, truncated_jpeg
from PIL import Image, ImageOps

import packer
import packer.tools.preview.sheet
from packer.cli import cli
from packer.cli.formatting import format_sheet
from packer.errors import UnknownNameError
from packer.format.backends import Backend
from packer.format.codecs import OriginalCodec
from packer.format.shardset import ShardSet
from packer.tools.preview.sheet import (
    MAX_SHEET_PIXELS,
    PAD,
    ContactSheet,
    make_contact_sheet,
    write_contact_sheet,
)
from packer.tools.selection import class_members, pick_samples, select_classes

CODECS = [("original", {}), ("jpeg", {"resize": 16}), ("pixels", {"resize": 16})]


def _convert(src: Path, dst: Path, backend: str = "lmdb", codec: str = "original",
             options: dict[str, int] | None = None) -> Path:
    packer.convert(src, dst, to=backend, codec=codec, codec_options=options or {}, workers=1,
                   progress=False)
    return dst


def _check_grid(sheet: ContactSheet, per_class: int, thumb: int) -> None:
    """Rows one per class, cells ``thumb`` square in columns, sheet exactly the grid's size."""
    columns = max(len(row.cells) for row in sheet.rows)
    assert columns == min(per_class, max(row.num_samples for row in sheet.rows))
    tops = [row.cells[0].box[1] for row in sheet.rows]
    row_height = tops[1] - tops[0]
    assert all(b - a == row_height for a, b in zip(tops, tops[1:], strict=False))
    assert sheet.image.size == (PAD + columns * (thumb + PAD), PAD + len(sheet.rows) * row_height)
    for row in sheet.rows:
        for column, cell in enumerate(row.cells):
            left, top, right, bottom = cell.box
            assert (left, top) == (PAD + column * (thumb + PAD), row.cells[0].box[1])
            assert (right - left, bottom - top) == (thumb, thumb)
            assert cell.class_name == row.class_name and cell.target == row.target
            assert cell.caption == f"{row.class_name} · #{cell.index}"
            pixels = np.asarray(sheet.image.crop(cell.box))
            assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 8, "a blank thumbnail"


def test_sheet_shows_each_sample_in_its_class_row(packed_once: Path, standard_tree: Path,
                                                  any_backend: Backend) -> None:
    sheet = make_contact_sheet(packed_once, per_class=3, thumb=32, seed=1)
    assert [row.class_name for row in sheet.rows] == ["cat", "dog", "zebra fish", "éclair"]
    assert [row.num_samples for row in sheet.rows] == [4, 4, 3, 3]
    _check_grid(sheet, per_class=3, thumb=32)
    ds_samples = list(packer.scan_imagefolder(standard_tree).items)
    for cell in sheet.cells:
        assert cell.error is None
        assert (cell.relpath, cell.target) == (ds_samples[cell.index].relpath, ds_samples[cell.index].label)
        source = Image.fromarray(rgb_of(standard_tree / cell.relpath))
        expected = ImageOps.contain(source, (32, 32), method=Image.Resampling.NEAREST)
        left = cell.box[0] + (32 - expected.width) // 2
        top = cell.box[1] + (32 - expected.height) // 2
        shown = sheet.image.crop((left, top, left + expected.width, top + expected.height))
        assert np.array_equal(np.asarray(shown), np.asarray(expected)), cell


@pytest.mark.parametrize(("codec", "options"), CODECS)
def test_every_codec_draws_a_full_grid(standard_tree: Path, tmp_path: Path, codec: str,
                                       options: dict[str, int]) -> None:
    dst = _convert(standard_tree, tmp_path / codec, "hdf5", codec, options)
    sheet = make_contact_sheet(dst, per_class=8, thumb=40)
    assert len(sheet.cells) == STANDARD_IMAGES
    _check_grid(sheet, per_class=8, thumb=40)
    png = Image.open(io.BytesIO(sheet.png_bytes()))
    assert png.format == "PNG" and png.size == sheet.image.size


def test_the_choice_depends_on_seed_and_class_only(packed_once: Path) -> None:
    first = make_contact_sheet(packed_once, per_class=2, seed=7, thumb=16)
    again = make_contact_sheet(packed_once, per_class=2, seed=7, thumb=16)
    assert first.png_bytes() == again.png_bytes()
    dog_only = make_contact_sheet(packed_once, per_class=2, seed=7, thumb=16, classes=["dog"])
    assert [c.index for c in dog_only.cells] == [c.index for c in first.rows[1].cells]
    seen = {tuple(c.index for c in make_contact_sheet(packed_once, per_class=2, seed=s, thumb=16).cells)
            for s in range(6)}
    assert len(seen) > 1
    for indices in seen:
        for row_start in range(0, len(indices), 2):
            assert list(indices[row_start:row_start + 2]) == sorted(indices[row_start:row_start + 2])


def test_selection_helpers() -> None:
    classes = ["a", "b,c", "d"]
    assert select_classes(classes) == [0, 1, 2]
    assert select_classes(classes, ["d,a", "a"]) == [0, 2]
    assert select_classes(classes, ["b,c"]) == [1]
    with pytest.raises(UnknownNameError, match=r"no class 'e'.*'a', 'b,c', 'd'"):
        select_classes(classes, ["a,e"])
    with pytest.raises(ValueError, match="no class selected"):
        select_classes(classes, [","])
    members = class_members(np.array([0, 0, 2, 2, 2, 0]), 3)
    assert [m.tolist() for m in members] == [[0, 1, 5], [], [2, 3, 4]]
    assert pick_samples(members, [0, 1, 2], per_class=2) == {0: [0, 1], 1: [], 2: [2, 3]}
    alone = pick_samples(members, [2], per_class=2, seed=3)[2]
    assert alone == pick_samples(members, [0, 2], per_class=2, seed=3)[2]
    assert len(alone) == 2 and alone == sorted(alone) and set(alone) <= {2, 3, 4}
    big = class_members(np.repeat([0, 1], [5, 1000]), 2)
    # Pinned: the choice is plain integer arithmetic (SplitMix64), the same on every machine.
    assert pick_samples(big, [1], per_class=3, seed=0) == {1: [366, 410, 821]}
    assert set(pick_samples(big, [1], per_class=3, seed=9)[1]) < set(pick_samples(big, [1], per_class=6,
                                                                                   seed=9)[1])


def test_unknown_class_lists_the_valid_names(packed_once: Path) -> None:
    with pytest.raises(UnknownNameError, match=r"no class 'dgo'\. Did you mean 'dog'\?.*'cat', 'dog'"):
        make_contact_sheet(packed_once, classes=["cat,dgo"])


def test_absurd_sheets_and_options_are_refused(packed_once: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert MAX_SHEET_PIXELS == Image.MAX_IMAGE_PIXELS  # any viewer built on Pillow opens a sheet
    monkeypatch.setattr(packer.tools.preview.sheet, "MAX_SHEET_PIXELS", 100_000)
    with pytest.raises(ValueError, match=r"4 classes x 4 thumbnails of 128 px.*over the 100,000.*classes="):
        make_contact_sheet(packed_once, per_class=4, thumb=128)
    for bad in ({"per_class": 0}, {"thumb": 8}, {"seed": -1}):
        with pytest.raises(ValueError):
            make_contact_sheet(packed_once, **bad)  # type: ignore[arg-type]


def test_undecodable_sample_gets_a_marked_cell(packed_once: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    decode = OriginalCodec.decode
    victim = ShardSet(packed_once).read(1)

    def flaky(self: OriginalCodec, data: bytes) -> Image.Image:
        if data == victim:
            raise OSError("broken data stream")
        return decode(self, data)

    monkeypatch.setattr(OriginalCodec, "decode", flaky)
    sheet = make_contact_sheet(packed_once, per_class=4, classes=["cat"], thumb=32)
    assert [c.index for c in sheet.failed] == [1]
    assert "broken data stream" in (sheet.failed[0].error or "")
    pink = np.asarray(sheet.image.crop(sheet.failed[0].box))
    assert (pink.reshape(-1, 3) == (255, 214, 214)).all(axis=1).mean() > 0.5
    assert "1 sample(s) could not be decoded: #1 (cat/002.png)" in format_sheet(sheet, "x.png")


def test_html_page_is_self_contained_and_escaped(make_tree: MakeTree, tmp_path: Path) -> None:
    src = make_tree({"a<b&c/x.png": image_bytes(".png", 20, 10, 1),
                     "a<b&c/y.jpg": image_bytes(".jpg", 10, 20, 2),
                     "plain/z.png": image_bytes(".png", 12, 12, 3),
                     "plain/broken.jpg": truncated_jpeg()})
    dst = _convert(src, tmp_path / "dst")
    out = tmp_path / "sheet.html"
    sheet = write_contact_sheet(dst, out, html=True, thumb=24)
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "a&lt;b&amp;c" in page and "a<b&c" not in page
    images = re.findall(r'<img src="data:image/jpeg;base64,[A-Za-z0-9+/=]+"', page)
    assert len(images) == len(sheet.cells) == 3
    assert not re.search(r"(src|href)=\"(?!data:)", page), "the page refers to another file"
    for text in ("lmdb", "original", "3 in 2 classes", "truncated 1"):
        assert text in page
    assert write_contact_sheet(dst, tmp_path / "again.html", html=True, thumb=24).html() == page


def test_cli_preview(packed_once: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    assert "Usage: packer preview" in runner.invoke(cli, ["preview", "--help"], prog_name="packer").stdout
    out = tmp_path / "sheet.png"
    result = runner.invoke(cli, ["preview", str(packed_once), "-o", str(out), "--per-class", "2",
                                 "--classes", "cat,dog", "--thumb", "32", "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert f"Wrote {out}: 4 samples of 2 classes" in result.stdout
    assert Image.open(out).size == (PAD + 2 * (32 + PAD), Image.open(out).height)
    html = tmp_path / "sheet.html"
    result = runner.invoke(cli, ["preview", str(packed_once), "-o", str(html), "--html"])
    assert result.exit_code == 0 and html.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    unknown = runner.invoke(cli, ["preview", str(packed_once), "-o", str(out), "--classes", "cow"])
    assert unknown.exit_code == 1
    assert unknown.stderr.count("\n") == 1 and "'cat', 'dog', 'zebra fish', 'éclair'" in unknown.stderr
    monkeypatch.setattr(packer.tools.preview.sheet, "MAX_SHEET_PIXELS", 100_000)
    huge = runner.invoke(cli, ["preview", str(packed_once), "-o", str(out), "--thumb", "1024"])
    assert huge.exit_code == 2 and "--per-class" in huge.stderr
    zero = runner.invoke(cli, ["preview", str(packed_once), "-o", str(out), "--per-class", "0"])
    assert zero.exit_code == 2
    missing = runner.invoke(cli, ["preview", str(tmp_path / "nope"), "-o", str(out)])
    assert missing.exit_code == 1 and missing.stderr.startswith("Error: ")
    assert "does not exist" in missing.stderr
