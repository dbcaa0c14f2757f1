"""The contract of a codec: what :class:`CodecContract` checks.

A codec turns source bytes into stored bytes at conversion time and stored bytes into an RGB
image at read time (:class:`~packer.format.codecs.base.Codec`). The contract encodes images of
every common mode, refuses what is not an image as a skip (``UnpackableFile``, never another
exception), round-trips its parameters through the manifest and a pickle (conversion tasks
carry the codec object to workers), converts with every registered backend and exports.

Use it with one line, with the codec built as users would configure it::

    from packer.testing import CodecContract

    class TestMyCodec(CodecContract):
        codec = MyCodec(level=3)

A codec class not registered yet is registered for each test (``register_codec``) and removed
after. Define it at module level, so that spawned conversion workers can import it.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import numpy as np
import pytest
from PIL import Image

from packer.conversion.run import convert
from packer.format.backends import backend_names
from packer.format.codecs import Codec, get_codec, register_codec
from packer.format.codecs.registry import CODECS
from packer.format.manifest import Manifest
from packer.source.imagecheck import DEFAULT_MAX_PIXELS
from packer.source.sourcefile import UnpackableFile
from packer.testing.plugins import registered
from packer.testing.trees import BROKEN_BYTES, ImageTree, encoded, image_tree, noise
from packer.tools.export.writer import export_dataset
from packer.tools.verify import verify_dataset

__all__ = ["CodecContract"]


def _samples() -> dict[str, bytes]:
    """Source files of every common kind: RGB JPEG and PNG, grayscale, with alpha, odd sizes."""
    return {"rgb.jpg": encoded(noise(40, 30, 1), "JPEG"), "rgb.png": encoded(noise(33, 17, 2), "PNG"),
            "gray.png": encoded(noise(20, 24, 3, "L"), "PNG"),
            "alpha.png": encoded(noise(9, 31, 4, "RGBA"), "PNG"),
            "gray.jpg": encoded(noise(25, 25, 5, "L"), "JPEG")}


def _pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image.convert("RGB"))


def _decoded(data: bytes) -> Image.Image:
    import io

    with Image.open(io.BytesIO(data)) as image:
        rgb: Image.Image = image.convert("RGB")
    return rgb


class CodecContract:
    """Every promise of a codec; subclass it with ``codec`` set (see the module docstring)."""

    codec: ClassVar[Codec]

    @pytest.fixture(autouse=True)
    def _codec_registered(self) -> Iterator[None]:
        cls = type(self.codec)
        with registered(CODECS, cls.name, cls, register_codec):
            yield

    def encode(self, data: bytes) -> bytes:
        """Stored bytes for ``data``, checked fully, as a conversion does by default."""
        return self.codec.encode(data, check="full", max_pixels=DEFAULT_MAX_PIXELS)

    def user_options(self) -> dict[str, Any]:
        """The codec's options as a user passes them (``codec_options``): its ``takes``."""
        params = self.codec.params()
        return {name: params[name] for name in self.codec.takes}

    # -- one image ----------------------------------------------------------------------

    def test_encode_then_decode_gives_an_rgb_image(self) -> None:
        for name, data in _samples().items():
            stored = self.encode(data)
            assert isinstance(stored, bytes), name
            assert self.encode(data) == stored, f"{name}: encoding must be deterministic"
            image = self.codec.decode(stored)
            assert image.mode == "RGB", name
            described = self.codec.describe(stored)
            assert (described.width, described.height) == image.size, name
            if self.codec.keeps_source_bytes:
                assert stored == data, f"{name}: keeps_source_bytes, but the bytes changed"
                assert np.array_equal(_pixels(image), _pixels(_decoded(data))), name
            exported = self.codec.exported_bytes(stored)
            assert np.array_equal(_pixels(_decoded(exported)), _pixels(image)), \
                f"{name}: the exported file does not hold the stored image"

    def test_what_is_not_an_image_is_refused_as_a_skip(self) -> None:
        truncated = _samples()["rgb.jpg"][:200]
        for data in (BROKEN_BYTES, b"plain text, no image at all", truncated):
            with pytest.raises(UnpackableFile):
                self.encode(data)

    def test_parameters_round_trip_through_the_manifest_and_pickle(self) -> None:
        codec = self.codec
        params = codec.params()
        assert json.loads(json.dumps(params)) == params, "params() must be JSON data"
        assert set(codec.takes) <= set(params), "every user option must be recorded in params()"
        assert type(codec).from_params(params) == codec
        assert get_codec(type(codec).name, params) == codec
        assert get_codec(type(codec).name, self.user_options()) == codec
        assert pickle.loads(pickle.dumps(codec)) == codec
        planned = codec.planned_bytes((40, 30), 1234)
        assert isinstance(planned, int) and planned > 0
        if codec.keeps_source_bytes:
            assert planned == 1234
        fmt = codec.export_format()
        assert fmt.suffix is None or fmt.suffix.startswith(".")
        assert all(keep == keep.lower() and keep.startswith(".") for keep in fmt.keeps)

    # -- whole datasets -----------------------------------------------------------------

    def convert(self, tree: ImageTree, dst: Path, backend: str) -> Manifest:
        """Convert ``tree`` with this codec and ``backend``; the manifest."""
        return convert(tree.root, dst, to=backend, codec=type(self.codec).name,
                       codec_options=self.user_options() or None, shard_size="2kB", workers=2).manifest

    def test_every_backend_stores_it_and_it_exports(self, tmp_path: Path) -> None:
        from packer.read.opening import open_dataset  # torch: only when a test reads

        tree = image_tree(tmp_path / "src", count=9)
        stored = [self.encode(tree.read(relpath)) for relpath, _ in tree.samples]
        for backend in backend_names():
            dst = tmp_path / backend
            manifest = self.convert(tree, dst, backend)
            assert manifest.codec == type(self.codec).name
            assert get_codec(manifest.codec, manifest.codec_params) == self.codec
            assert [(s.path, s.reason) for s in manifest.skipped] == [(b, "truncated") for b in tree.broken]
            raw = open_dataset(dst, decode=False)
            assert [raw[i][0] for i in range(len(raw))] == stored, backend
            decoded = open_dataset(dst)
            for i, payload in enumerate(stored):
                assert np.array_equal(np.asarray(decoded[i][0]), _pixels(self.codec.decode(payload)))
            assert verify_dataset(dst, deep=True).ok, backend
        self.check_export(tmp_path / backend_names()[0], tmp_path / "out", tree, stored)

    def check_export(self, dst: Path, out: Path, tree: ImageTree, stored: list[bytes]) -> None:
        """``export_dataset`` writes each sample's :meth:`Codec.exported_bytes` under the name
        its :meth:`Codec.export_format` gives, in the tree's class folders."""
        result = export_dataset(dst, out)
        fmt = self.codec.export_format()
        assert result.exported_as == fmt.description and result.written == len(tree.samples)
        for (relpath, _), payload in zip(tree.samples, stored, strict=True):
            path = PurePosixPath(relpath)
            if fmt.suffix is not None and path.suffix.lower() not in fmt.keeps:
                path = path.with_suffix(fmt.suffix)
            assert (out / path).read_bytes() == self.codec.exported_bytes(payload), relpath
        assert sorted(p.name for p in out.iterdir()) == list(tree.classes)
