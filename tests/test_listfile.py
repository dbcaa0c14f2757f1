"""List-file sources: plain-text, CSV and JSON Lines lists of images and labels, in list order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from imagetools import dataset_snapshot, jpeg_bytes, png_bytes, write_tree

import packer
from packer.cli import cli
from packer.errors import SourceError
from packer.format.backends import Backend
from packer.source.listfile import scan_listfile

CODECS = [("original", {}), ("jpeg", {"resize": 8}), ("pixels", {"resize": 8})]


def _images(root: Path) -> Path:
    """Six images in a flat folder plus one in a subfolder; no class folders."""
    spec = {f"img/{i:02d}.jpg": jpeg_bytes(12 + i, 10, i) for i in range(6)}
    spec["img/deep/x.png"] = png_bytes(9, 11, 7)
    return write_tree(root, spec)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _csv(root: Path) -> Path:
    return _write(root / "labels.csv", "file_name,label,split,score\n"
                  "img/03.jpg,dog,train,0.5\n"
                  "img/00.jpg,cat,train,0.25\n"
                  "img/deep/x.png,bird,val,1\n"
                  "img/05.jpg,cat,val,\n")


def test_a_csv_list_keeps_its_order_names_classes_and_keeps_other_columns(tmp_path: Path,
                                                                         any_backend: Backend) -> None:
    src = _images(tmp_path / "src")
    listed = _csv(src)
    result = packer.convert(listed, tmp_path / "dst", to=any_backend.name, workers=1)
    ds = packer.open_dataset(tmp_path / "dst")
    assert ds.classes == ["bird", "cat", "dog"]  # sorted, as ImageFolder sorts folder names
    assert [path for path, _ in ds.samples] == ["img/03.jpg", "img/00.jpg", "img/deep/x.png", "img/05.jpg"]
    assert list(ds.targets) == [2, 1, 0, 1]
    assert ds.metadata[0] == {"split": "train", "score": "0.5"}
    assert ds.metadata[3] == {"split": "val", "score": ""}
    assert ds[2][0].size == (9, 11)
    manifest = result.manifest
    assert manifest.source == str(listed)
    assert manifest.extra["list"]["format"] == "csv"
    assert manifest.extra["list"]["metadata_columns"] == ["split", "score"]
    assert manifest.scan.filter == "list"
    assert packer.verify_dataset(tmp_path / "dst", deep=True).ok


@pytest.mark.parametrize(("codec", "options"), CODECS)
def test_every_codec_packs_a_text_list_with_integer_labels(tmp_path: Path, any_backend: Backend, codec: str,
                                                           options: dict[str, int]) -> None:
    src = _images(tmp_path / "src")
    listed = _write(tmp_path / "train.txt", "# Caffe style\nimg/01.jpg 3\nimg/02.jpg 0\n\nimg/deep/x.png 3\n")
    packer.convert(listed, tmp_path / "dst", to=any_backend.name, codec=codec, codec_options=options,
                   root=src, workers=2)
    ds = packer.open_dataset(tmp_path / "dst")
    # Integer labels are the targets: classes are named by number, and gaps (1, 2) stay.
    assert ds.classes == ["0", "1", "2", "3"]
    assert list(ds.targets) == [3, 0, 3]
    assert ds.metadata[1] == {}
    assert ds.manifest.class_counts == (1, 0, 0, 2)
    assert all(image.mode == "RGB" for image, _ in ds)


def test_integer_labels_take_their_names_from_a_classes_file(tmp_path: Path) -> None:
    src = _images(tmp_path / "src")
    listed = _write(src / "list.jsonl", "\n".join(json.dumps(r) for r in [
        {"path": "img/00.jpg", "label": 1, "box": [1, 2, 3, 4]},
        {"path": "img/01.jpg", "label": 0, "box": None}]) + "\n")
    classes = _write(tmp_path / "names.txt", "background\nperson\n")
    packer.convert(listed, tmp_path / "dst", to="hdf5", classes_file=classes, workers=1)
    ds = packer.open_dataset(tmp_path / "dst")
    assert ds.classes == ["background", "person"] and list(ds.targets) == [1, 0]
    assert ds.metadata[0] == {"box": [1, 2, 3, 4]} and ds.metadata[1] == {"box": None}


def test_a_missing_listed_file_is_skipped_and_listed_and_the_counts_add_up(tmp_path: Path,
                                                                         any_backend: Backend) -> None:
    src = _images(tmp_path / "src")
    (src / "img" / "bad.jpg").write_bytes(b"not an image")
    listed = _write(src / "list.txt", "img/00.jpg 0\nimg/gone.jpg 1\nimg/bad.jpg 1\nimg/01.jpg 1\n")
    result = packer.convert(listed, tmp_path / "dst", to=any_backend.name, workers=1)
    assert [(s.path, s.reason) for s in result.manifest.skipped] == [("img/gone.jpg", "missing"),
                                                                     ("img/bad.jpg", "not_an_image")]
    assert result.found == 4 and result.manifest.num_samples == 2
    assert [p for p, _ in packer.open_dataset(tmp_path / "dst").samples] == ["img/00.jpg", "img/01.jpg"]


BAD_LISTS = [
    ("list.txt", "img/00.jpg 0\nimg/01.jpg\n", 2, "expected 'relative/path label'"),
    ("list.txt", "img/00.jpg 0\nimg/01.jpg cat\n", 2, "is not an integer"),
    ("list.txt", "img/00.jpg 0\n/etc/passwd 1\n", 2, "is not relative to the root"),
    ("list.txt", "img/00.jpg 0\n../img/01.jpg 1\n", 2, "is not relative to the root"),
    ("list.txt", "img/00.jpg 0\nimg/01.jpg 1\nimg/./00.jpg 2\n", 3, "listed again (first on line 1)"),
    ("list.txt", "img/00.jpg -1\n", 1, "negative"),
    ("list.csv", "path,label\nimg/00.jpg,cat\nimg/01.jpg,\n", 3, "must be an integer or a class name"),
    ("list.csv", "path,label\nimg/00.jpg,cat,extra\n", 2, "more fields than the header"),
    ("list.jsonl", '{"path": "img/00.jpg", "label": "cat"}\n{"path": "img/01.jpg", "label": 3}\n', 2,
     "labels mix numbers and class names"),
    ("list.csv", "name,label\nimg/00.jpg,cat\n", None, "no path column"),
    ("list.jsonl", '{"path": "img/00.jpg", "label": "cat"}\n{"path": "img/01.jpg", "label": 1.5}\n', 2,
     "must be an integer or a class name"),
    ("list.jsonl", '{"path": "img/00.jpg", "label": "cat"}\n[1, 2]\n', 2, "not a JSON object"),
    ("list.jsonl", '{"path": "img/00.jpg", "label": "cat"}\n{"path": \n', 2, "not a JSON object"),
    ("list.jsonl", '{"label": "cat"}\n', None, "no path column"),
    ("list.txt", "", None, "lists no image"),
]


@pytest.mark.parametrize(("name", "text", "line", "what"), BAD_LISTS)
def test_a_bad_list_is_one_error_naming_the_file_and_line_and_nothing_is_written(
        tmp_path: Path, name: str, text: str, line: int | None, what: str) -> None:
    src = _images(tmp_path / "src")
    listed = _write(src / name, text)
    with pytest.raises(SourceError) as caught:
        packer.convert(listed, tmp_path / "dst", to="lmdb", workers=1)
    message = str(caught.value)
    assert str(listed) in message and what in message, message
    if line is not None:
        assert f"line {line}:" in message, message
    assert not (tmp_path / "dst").exists()
    result = CliRunner().invoke(cli, ["convert", str(listed), str(tmp_path / "dst"), "--to", "lmdb"])
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1, result.output


def test_classes_file_errors_name_the_label(tmp_path: Path) -> None:
    src = _images(tmp_path / "src")
    listed = _write(src / "list.txt", "img/00.jpg 0\nimg/01.jpg 2\n")
    names = _write(tmp_path / "names.txt", "a\nb\n")
    with pytest.raises(SourceError, match=r"line 2: the label 2 has no name.*names 2 classes"):
        scan_listfile(listed, classes_file=names)
    with pytest.raises(SourceError, match="names a class twice"):
        scan_listfile(listed, classes_file=_write(tmp_path / "twice.txt", "a\na\nc\n"))


def test_list_options_on_a_tree_are_refused(tmp_path: Path) -> None:
    src = _images(tmp_path / "src")
    with pytest.raises(SourceError, match="root= apply to a list file or Parquet source"):
        packer.convert(src, tmp_path / "dst", to="lmdb", root=src)


def test_array_tasks_and_resume_work_for_lists(tmp_path: Path) -> None:
    src = _images(tmp_path / "src")
    listed = _csv(src)
    packer.convert(listed, tmp_path / "one", to="lmdb", shard_size="1KB", workers=1)
    for task_id in range(2):
        packer.convert_task(listed, tmp_path / "array", task_id=task_id, num_tasks=2, to="lmdb",
                            shard_size="1KB", workers=1)
    packer.merge(tmp_path / "array")
    assert dataset_snapshot(tmp_path / "array") == dataset_snapshot(tmp_path / "one")
    again = packer.convert(listed, tmp_path / "one", to="lmdb", shard_size="1KB", resume=True)
    assert again.already_complete


def test_the_command_line_converts_a_list_and_info_says_so(tmp_path: Path) -> None:
    src = _images(tmp_path / "src")
    listed = _write(tmp_path / "list.txt", "img/00.jpg 1\nimg/01.jpg 0\n")
    runner = CliRunner()
    out = runner.invoke(cli, ["convert", str(listed), str(tmp_path / "dst"), "--to", "hdf5", "--root",
                              str(src), "-q"])
    assert out.exit_code == 0, out.output
    info = runner.invoke(cli, ["info", str(tmp_path / "dst")])
    assert info.exit_code == 0
    assert f"list    {listed} (text, root {src})" in info.output
    dry = runner.invoke(cli, ["convert", str(listed), str(tmp_path / "dry"), "--to", "hdf5", "--root",
                              str(src), "--dry-run"])
    assert dry.exit_code == 0 and "2 images in 2 classes" in dry.output


@pytest.mark.parametrize("name", ["labels.csv", "labels.jsonl", "labels.txt"])
def test_export_as_a_list_converts_back_to_the_same_dataset(tmp_path: Path, name: str) -> None:
    src = _images(tmp_path / "src")
    rows = [("img/03.jpg", 2, "a"), ("img/00.jpg", 0, "b"), ("img/deep/x.png", 2, "c")]
    if name.endswith(".csv"):
        text = "path,label,note\n" + "".join(f"{p},{label},{n}\n" for p, label, n in rows)
    elif name.endswith(".jsonl"):
        text = "".join(json.dumps({"path": p, "label": label, "note": n}) + "\n" for p, label, n in rows)
    else:
        text = "".join(f"{p} {label}\n" for p, label, _ in rows)
    listed = _write(src / name, text)
    packer.convert(listed, tmp_path / "dst", to="lmdb", workers=1)
    packer.export_dataset(tmp_path / "dst", tmp_path / "out", as_list=True)
    assert (tmp_path / "out" / name).is_file() and (tmp_path / "out" / "img" / "deep" / "x.png").is_file()
    packer.convert(tmp_path / "out" / name, tmp_path / "again", to="lmdb", workers=1)
    first, again = packer.open_dataset(tmp_path / "dst"), packer.open_dataset(tmp_path / "again")
    assert list(first.samples) == list(again.samples) and first.classes == again.classes
    assert list(first.metadata) == list(again.metadata)
    assert [img.tobytes() for img, _ in first] == [img.tobytes() for img, _ in again]
    assert packer.verify_dataset(tmp_path / "dst", deep=True, against=listed).ok
    assert packer.verify_dataset(tmp_path / "again", deep=True, against=tmp_path / "out" / name).ok
    # As a tree: each file under its class folder, a tree ImageFolder (and packer) reads.
    packer.export_dataset(tmp_path / "dst", tmp_path / "tree")
    tree = packer.ImageFolderDataset(tmp_path / "tree", allow_empty=True)  # integer labels: gaps
    exported = sorted(Path(p).relative_to(tmp_path / "tree").as_posix() for p, _ in tree.samples)
    assert exported == sorted(f"{first.classes[t]}/{p}" for p, t in first.samples)
    with pytest.raises(ValueError, match="not a list file"):
        packer.export_dataset(_tree_dataset(tmp_path), tmp_path / "x", as_list=True)


def _tree_dataset(tmp_path: Path) -> Path:
    src = write_tree(tmp_path / "tree-src", {"a/1.jpg": jpeg_bytes(8, 8, 1)})
    packer.convert(src, tmp_path / "tree-dst", to="hdf5", workers=1)
    return tmp_path / "tree-dst"


class _WithMetadata(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Reads a packed dataset's samples and metadata in DataLoader workers."""

    def __init__(self, dataset: packer.PackedImageDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> tuple[int, str, int]:
        image, target = self.dataset[i]
        return target, json.dumps(self.dataset.metadata[i], sort_keys=True), image.size[0]


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_list_datasets_read_the_same_in_every_worker_start_method(tmp_path: Path, any_backend: Backend,
                                                                  context: str) -> None:
    src = _images(tmp_path / "src")
    listed = _csv(src)
    packer.convert(listed, tmp_path / "dst", to=any_backend.name, workers=2)
    ds = packer.open_dataset(tmp_path / "dst")
    ds[0]  # touch it in the parent first: workers must not inherit open handles badly
    expected = sorted(_WithMetadata(ds)[i] for i in range(len(ds)))
    loader = torch.utils.data.DataLoader(_WithMetadata(ds), batch_size=None, num_workers=2,
                                         multiprocessing_context=context)
    assert sorted(tuple(item) for item in loader) == expected
