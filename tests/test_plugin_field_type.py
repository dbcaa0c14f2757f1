"""A field type added by a plugin (``packer.register_field_type``), as docs/plugins.md shows it:
keypoints, float32 ``[K, 3]`` (x, y, visibility) tied to an image and checked against its size.
Written with ``packer.write``, read back by the datasets and the tools like a built-in type, and
its bad values skipped with a reason, so a new field type needs no change to packer."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import packer
from packer.format.fields.base import FieldValueError
from packer.format.fields.types.images import image_size
from packer.format.fields.types.values import field_name, known


class KeypointsType(packer.FieldType):
    """Keypoints on the ``image`` field: float32 ``[K, 3]``, x and y in pixels inside the image."""

    name: ClassVar[str] = "keypoints"
    refers_to: ClassVar[Mapping[str, str]] = {"image": "image"}

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("image",))
        return {"image": field_name(params, "image")}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        points = np.asarray(value, dtype=np.float32).reshape(-1, 3)
        width, height = image_size(context, params["image"])
        if ((points[:, 0] < 0) | (points[:, 0] > width) | (points[:, 1] < 0) | (points[:, 1] > height)).any():
            raise FieldValueError("invalid_value", f"a keypoint lies outside the {width}x{height} image")
        return points.tobytes()

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> np.ndarray:
        if len(payload) % 12:
            raise ValueError(f"keypoints record of {len(payload)} bytes is no whole number of points")
        return np.frombuffer(bytes(payload), dtype=np.float32).reshape(-1, 3)


SCHEMA = [{"name": "image", "type": "image"},
          {"name": "pose", "type": "keypoints", "params": {"image": "image"}},
          {"name": "label", "type": "label", "params": {"classes": ["sit", "stand"]}}]


def _unregister() -> None:
    from packer.format.fields.registry import FIELD_TYPES, _instance
    if "keypoints" in FIELD_TYPES:
        FIELD_TYPES.unregister("keypoints")
    _instance.cache_clear()


@pytest.fixture
def keypoints(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # register_field_type reaches forked workers only (an installed plugin uses the packer.fields
    # entry point, which spawned ones find too); pytest-xdist's threads would make them spawned
    from packer.conversion.engines import local
    monkeypatch.setattr(local, "START_METHOD", "fork")
    packer.register_field_type(KeypointsType)
    yield
    _unregister()


def _samples() -> list[dict[str, Any]]:
    return [{"__key__": f"p{i}", "image": np.full((20, 30, 3), i * 40, np.uint8),
             "pose": [[5.0 + i, 6.0, 1.0], [29.5, 19.0 if i != 2 else 25.0, 2.0]], "label": i % 2}
            for i in range(4)]


def test_a_plugin_type_is_written_read_and_checked_like_a_built_in(keypoints: None, tmp_path: Path) -> None:
    manifest = packer.write(tmp_path / "ds", _samples(), SCHEMA, to="lmdb", workers=1).manifest
    assert [(s.path, s.reason) for s in manifest.skipped] == [("p2", "invalid_value")]  # 25 > 20 px
    assert "outside the 30x20 image" in manifest.skipped[0].detail
    dataset = packer.open_dataset(tmp_path / "ds", fields=("pose", "label"))
    assert len(dataset) == 3
    assert dataset[1]["pose"].tolist() == [[6.0, 6.0, 1.0], [29.5, 19.0, 2.0]] and dataset[1]["label"] == 1
    assert packer.verify_dataset(tmp_path / "ds", deep=True).ok
    assert [f["type"] for f in packer.dataset_info(tmp_path / "ds").to_dict()["fields"]] == [
        "image", "keypoints", "label"]
    shards = packer.export_webdataset(tmp_path / "ds", tmp_path / "out")  # an unknown type: its bytes
    assert shards.members["pose"] == "pose.bin" and "pose=pose.bin:bytes" in shards.fields


def test_a_dataset_of_an_unregistered_type_says_what_is_missing(keypoints: None, tmp_path: Path) -> None:
    packer.write(tmp_path / "ds", _samples()[:1], SCHEMA, to="lmdb", workers=1)
    _unregister()
    with pytest.raises(packer.PackerError, match="keypoints"):
        packer.open_dataset(tmp_path / "ds")[0]
