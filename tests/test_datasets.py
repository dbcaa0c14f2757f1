"""The torch Datasets over a packed directory: ImageFolder's attributes, handles, read-only data.

What the dataset does above its backend (attributes, indexing, transforms, pickling) runs once
(``packed_once``); the class each backend opens as, its open handles, read-only storage, two
datasets on one file and threads run per backend (``packed``)."""

from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from imagetools import (
    DROP_DAC_PRELUDE,
    STANDARD_IMAGES,
    PixelDigest,
    ToTensor,
    digest_collate,
    jpeg_bytes,
    rgb_of,
    sha,
    standard_spec,
)
from torch.utils.data import DataLoader, Dataset

import packer
from packer import (
    DatasetError,
    HDF5ImageDataset,
    IncompleteDatasetError,
    LMDBImageDataset,
    NotADatasetError,
    convert,
    open_dataset,
)
from packer.format.backends import Backend
from packer.format.manifest import IN_PROGRESS_NAME
from packer.read.baseline import ImageFolderDataset
from packer.read.datasets import PackedImageDataset

CLASSES = ["cat", "dog", "zebra fish", "éclair"]
SAMPLES = [
    ("cat/001.jpg", 0), ("cat/002.png", 0), ("cat/sub/003.jpg", 0), ("cat/sub/deeper/004.bmp", 0),
    ("dog/a.JPG", 1), ("dog/b.Png", 1), ("dog/c.jpeg", 1), ("dog/d.jpg", 1),
    ("zebra fish/with space.png", 2), ("zebra fish/ünï cödé.jpg", 2), ("zebra fish/x/y z.webp", 2),
    ("éclair/1.png", 3), ("éclair/10.png", 3), ("éclair/2.png", 3),
]
CLASS_OF_BACKEND = {"lmdb": LMDBImageDataset, "hdf5": HDF5ImageDataset}


def fds_under(root: Path) -> list[str]:
    """Paths under ``root`` that this process holds open file descriptors to."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root) + os.sep):
            out.append(target)
    return out


def shard_fds(root: Path, backend: Backend) -> list[str]:
    return [p for p in fds_under(root) if p.endswith(backend.suffix)]


def test_open_dataset_picks_the_backend_class(packed: Path, backend: Backend) -> None:
    ds = open_dataset(packed)
    assert type(ds) is CLASS_OF_BACKEND[backend.name]
    assert isinstance(ds, PackedImageDataset) and isinstance(ds, Dataset)
    assert ds.manifest.backend == backend.name
    assert backend.name in repr(ds) and "samples=14" in repr(ds)
    direct = CLASS_OF_BACKEND[backend.name](packed)
    assert direct.samples == ds.samples
    assert PackedImageDataset(packed).samples == ds.samples  # the base class takes any backend


def test_the_wrong_class_names_the_right_one(packed: Path, backend: Backend) -> None:
    wrong = HDF5ImageDataset if backend.name == "lmdb" else LMDBImageDataset
    right = CLASS_OF_BACKEND[backend.name].__name__
    with pytest.raises(DatasetError, match=f"use {right}"):
        wrong(packed)


def test_imagefolder_attributes(packed_once: Path) -> None:
    ds = open_dataset(packed_once)
    assert ds.classes == CLASSES
    assert ds.class_to_idx == {name: i for i, name in enumerate(CLASSES)}
    assert len(ds) == STANDARD_IMAGES == len(SAMPLES)
    assert ds.samples == SAMPLES
    assert list(ds.samples) == SAMPLES
    assert ds.imgs == SAMPLES
    assert ds.targets == [t for _, t in SAMPLES]
    assert list(ds.targets) == [t for _, t in SAMPLES]
    assert all(type(t) is int for t in ds.targets)
    targets = np.asarray(ds.targets)
    assert targets.dtype == np.int64 and targets.tolist() == [t for _, t in SAMPLES]
    assert ds.samples[-1] == SAMPLES[-1] and ds.samples[1:4] == SAMPLES[1:4]
    assert ds.samples[::-3] == SAMPLES[::-3]
    assert len(ds.samples) == len(ds.targets) == len(ds)
    assert ds.samples != SAMPLES[:-1] and ds.samples != list(reversed(SAMPLES))
    with pytest.raises(IndexError):
        ds.samples[len(ds)]
    with pytest.raises(TypeError):
        hash(ds.samples)


def test_same_as_the_imagefolder_reference(packed_once: Path, standard_tree: Path) -> None:
    ds = open_dataset(packed_once)
    folder = ImageFolderDataset(standard_tree)
    assert ds.classes == folder.classes and ds.class_to_idx == folder.class_to_idx
    assert ds.targets == folder.targets
    assert [os.path.join(folder.root, *p.split("/")) for p, _ in ds.samples] == \
        [p for p, _ in folder.samples]
    for i in range(len(ds)):
        mine, theirs = ds[i], folder[i]
        assert mine[1] == theirs[1]
        assert np.array_equal(np.asarray(mine[0]), np.asarray(theirs[0]))


def test_items_are_rgb_pil_images_with_the_source_pixels(packed_once: Path,
                                                        standard_tree: Path) -> None:
    ds = open_dataset(packed_once)
    for i, (relpath, target) in enumerate(SAMPLES):
        image, label = ds[i]
        assert image.mode == "RGB"
        assert label == target and type(label) is int
        assert np.array_equal(np.asarray(image), rgb_of(standard_tree / relpath))


def test_negative_indexing_and_bounds(packed_once: Path) -> None:
    ds = open_dataset(packed_once, decode=False)
    assert ds[-1] == ds[len(ds) - 1]
    assert ds[-len(ds)] == ds[0]
    assert ds[np.int64(3)] == ds[3]
    for bad in (len(ds), -len(ds) - 1, 10**9):
        with pytest.raises(IndexError):
            ds[bad]


def test_decode_false_returns_the_stored_bytes(packed_once: Path, standard_tree: Path) -> None:
    ds = open_dataset(packed_once, decode=False, transform=len)
    spec = standard_spec()
    for i, (relpath, _) in enumerate(SAMPLES):
        assert ds[i][0] == len(spec[relpath])
    raw = open_dataset(packed_once, decode=False)
    assert [raw[i][0] for i in range(len(raw))] == [spec[p] for p, _ in SAMPLES]


def test_transforms_are_applied(packed_once: Path, standard_tree: Path) -> None:
    ds = open_dataset(packed_once, transform=ToTensor(), target_transform=lambda t: t * 10 + 1)
    for i, (relpath, target) in enumerate(SAMPLES):
        tensor, label = ds[i]
        assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.uint8
        expected = rgb_of(standard_tree / relpath)
        assert tensor.shape == (3, *expected.shape[:2])
        assert torch.equal(tensor.permute(1, 2, 0), torch.from_numpy(expected.copy()))
        assert label == target * 10 + 1
    assert ds.targets == [t for _, t in SAMPLES]  # targets are not transformed, as ImageFolder


def test_getitems_equals_single_reads(packed_once: Path) -> None:
    ds = open_dataset(packed_once, transform=PixelDigest())
    indices = [13, 0, 0, 5, -1, 7, 2, -14]
    assert ds.__getitems__(indices) == [ds[i] for i in indices]
    assert ds.__getitems__([]) == []
    with pytest.raises(IndexError):
        ds.__getitems__([0, len(ds)])


def test_dataloader_in_the_main_process(packed_once: Path) -> None:
    ds = open_dataset(packed_once, decode=False)
    loader = DataLoader(ds, batch_size=4, shuffle=False, num_workers=0, collate_fn=digest_collate)
    got = [item for batch in loader for item in batch]
    assert got == [(sha(ds[i][0]), t) for i, (_, t) in enumerate(SAMPLES)]


def test_pickled_dataset_is_small_and_works(packed_once: Path) -> None:
    ds = open_dataset(packed_once, transform=PixelDigest())
    assert len(pickle.dumps(ds)) < 64 * 1024
    first = [ds[i] for i in range(len(ds))]
    blob = pickle.dumps(ds)
    assert len(blob) < 64 * 1024
    copy = pickle.loads(blob)
    assert type(copy) is type(ds)
    assert [copy[i] for i in range(len(copy))] == first
    assert copy.samples == SAMPLES and copy.classes == CLASSES


def test_no_open_handle_after_init_pickling_and_close(packed: Path, backend: Backend) -> None:
    ds = open_dataset(packed)
    assert fds_under(packed) == []
    copy = pickle.loads(pickle.dumps(ds))
    assert fds_under(packed) == []
    ds[0], ds[len(ds) - 1]
    held = shard_fds(packed, backend)
    # reading opened the shard, once (LMDB: its environment, and the descriptor it preads with)
    assert len(held) == (2 if backend.name == "lmdb" else 1) and len(set(held)) == 1
    again = pickle.loads(pickle.dumps(ds))  # pickling a dataset that has read opens nothing
    assert shard_fds(packed, backend) == held
    ds.close()
    assert shard_fds(packed, backend) == []
    assert again[0][1] == copy[1][1] == 0
    copy.close()
    again.close()
    assert shard_fds(packed, backend) == []
    assert ds[2][1] == 0  # a closed dataset reopens on the next read
    ds.close()


def test_two_datasets_on_the_same_files_in_one_process(packed: Path) -> None:
    one, two = open_dataset(packed, decode=False), open_dataset(packed, decode=False)
    assert one[3] == two[3]
    assert [one[i] for i in range(len(one))] == [two[i] for i in range(len(two))]


def _all_files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")}


def test_read_only_storage(packed: Path) -> None:
    before = _all_files(packed)
    modes = {p: p.stat().st_mode for p in [packed, *packed.rglob("*")]}
    for path, mode in modes.items():
        os.chmod(path, stat.S_IMODE(mode) & ~0o222)
    try:
        ds = open_dataset(packed, transform=PixelDigest())
        digests = [ds[i] for i in range(len(ds))] + ds.__getitems__(list(range(len(ds))))
        assert len(digests) == 2 * len(ds)
        ds.close()
        assert _all_files(packed) == before  # no lock file, nothing written next to the data
    finally:
        for path, mode in modes.items():
            os.chmod(path, stat.S_IMODE(mode))


_READ_ALL = DROP_DAC_PRELUDE + textwrap.dedent("""
    import hashlib
    import packer
    ds = packer.open_dataset(sys.argv[1], decode=False)
    for i in range(len(ds)):
        print(hashlib.sha256(ds[i][0]).hexdigest(), ds[i][1])
    print("READ", len(ds))
""")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_read_only_storage_with_binding_modes(packed: Path) -> None:
    """As above, in a child for which the read-only modes really bind (see DROP_DAC_PRELUDE)."""
    expected = [f"{sha(standard_spec()[p])} {t}" for p, t in SAMPLES]
    modes = {p: p.stat().st_mode for p in [packed, *packed.rglob("*")]}
    for path, mode in modes.items():
        os.chmod(path, stat.S_IMODE(mode) & ~0o222)
    try:
        proc = subprocess.run([sys.executable, "-c", _READ_ALL, str(packed)],
                              env={**os.environ, "PACKER_TEST_PROBE": str(packed)},
                              capture_output=True, text=True, timeout=100, check=False)
    finally:
        for path, mode in modes.items():
            os.chmod(path, stat.S_IMODE(mode))
    if proc.stdout.startswith("SKIP"):
        pytest.skip(f"cannot make file modes bind in a child: {proc.stdout.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [*expected, f"READ {len(SAMPLES)}"]


def test_non_utf8_file_names_round_trip(make_tree: Any, tmp_path: Path, any_backend: Backend) -> None:
    src = make_tree({"cls/plain.jpg": jpeg_bytes(8, 8, 1)})
    raw_name = b"caf\xe9 latin-1.jpg"
    with open(os.path.join(os.fsencode(src / "cls"), raw_name), "wb") as handle:
        handle.write(jpeg_bytes(8, 8, 2))
    convert(src, tmp_path / "dst", to=any_backend.name)
    ds = open_dataset(tmp_path / "dst", decode=False)
    names = [p for p, _ in ds.samples]
    assert names == ["cls/caf\udce9 latin-1.jpg", "cls/plain.jpg"]
    assert os.fsencode(names[0]) == b"cls/" + raw_name
    assert ds[0][0] == jpeg_bytes(8, 8, 2)


def test_not_a_dataset_and_incomplete(tmp_path: Path, backend: Backend) -> None:
    with pytest.raises(NotADatasetError, match="does not exist"):
        open_dataset(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(NotADatasetError, match="not a packer dataset"):
        open_dataset(tmp_path / "plain")
    with pytest.raises(NotADatasetError):
        CLASS_OF_BACKEND[backend.name](tmp_path / "plain")
    (tmp_path / "plain" / IN_PROGRESS_NAME).write_text("{}")
    with pytest.raises(IncompleteDatasetError, match="incomplete"):
        CLASS_OF_BACKEND[backend.name](tmp_path / "plain")


def test_public_api_exports_the_dataset_classes() -> None:
    assert packer.LMDBImageDataset is LMDBImageDataset
    assert packer.open_dataset is open_dataset
    with pytest.raises(AttributeError):
        packer.NoSuchThing  # noqa: B018


def test_overlapping_decodes_leave_pillow_s_limit_as_it_was() -> None:
    """Two decodes that overlap (threads) must not leave Pillow's bomb limit lifted for good."""
    from PIL import Image

    from packer.source.imagecheck import pixel_limit_lifted as _pixel_limit_lifted

    original = Image.MAX_IMAGE_PIXELS
    first, second = _pixel_limit_lifted(), _pixel_limit_lifted()
    first.__enter__()
    second.__enter__()
    assert Image.MAX_IMAGE_PIXELS is None
    first.__exit__(None, None, None)
    second.__exit__(None, None, None)
    assert original == Image.MAX_IMAGE_PIXELS


def test_threads_decoding_at_once(packed: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from PIL import Image

    original = Image.MAX_IMAGE_PIXELS
    ds = open_dataset(packed, transform=PixelDigest())
    expected = [ds[i] for i in range(len(ds))]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: ds[i % len(ds)], range(20 * len(ds))))
    assert got == expected * 20
    assert original == Image.MAX_IMAGE_PIXELS
