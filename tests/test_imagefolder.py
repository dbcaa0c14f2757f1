"""``packer.scan_imagefolder`` against a literal restatement of torchvision's ImageFolder scan.

The oracle below is torchvision's ``find_classes`` + ``make_dataset`` (``datasets/folder.py``)
copied statement for statement, so that the comparison needs no torchvision install.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from imagetools import DROP_DAC_PRELUDE, Dir, Symlink, write_tree

import packer
from packer import EmptySourceError, SourceNotFoundError, find_classes, scan_imagefolder
from packer.errors import PackerError, SourceError

# ----------------------------------------------------------------------------- the oracle

TV_IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def tv_find_classes(directory: str) -> tuple[list[str], dict[str, int]]:
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    class_to_idx = {cls_name: i for i, cls_name in enumerate(classes)}
    return classes, class_to_idx


def tv_has_file_allowed_extension(filename: str, extensions: str | tuple[str, ...]) -> bool:
    return filename.lower().endswith(extensions if isinstance(extensions, str) else tuple(extensions))


def tv_make_dataset(
    directory: str,
    class_to_idx: dict[str, int] | None = None,
    extensions: tuple[str, ...] | None = None,
    is_valid_file: Callable[[str], bool] | None = None,
    allow_empty: bool = False,
) -> list[tuple[str, int]]:
    directory = os.path.expanduser(directory)
    if class_to_idx is None:
        _, class_to_idx = tv_find_classes(directory)
    elif not class_to_idx:
        raise ValueError("'class_to_index' must have at least one entry to collect any samples.")
    both_none = extensions is None and is_valid_file is None
    both_something = extensions is not None and is_valid_file is not None
    if both_none or both_something:
        raise ValueError("Both extensions and is_valid_file cannot be None or not None at the same time")
    if extensions is not None:
        def is_valid_file(x: str) -> bool:
            return tv_has_file_allowed_extension(x, extensions)  # type: ignore[arg-type]
    assert is_valid_file is not None
    instances = []
    available_classes = set()
    for target_class in sorted(class_to_idx.keys()):
        class_index = class_to_idx[target_class]
        target_dir = os.path.join(directory, target_class)
        if not os.path.isdir(target_dir):
            continue
        for root, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(root, fname)
                if is_valid_file(path):
                    item = path, class_index
                    instances.append(item)
                    if target_class not in available_classes:
                        available_classes.add(target_class)
    empty_classes = set(class_to_idx.keys()) - available_classes
    if empty_classes and not allow_empty:
        msg = f"Found no valid file for the classes {', '.join(sorted(empty_classes))}. "
        if extensions is not None:
            msg += f"Supported extensions are: {', '.join(extensions)}"
        raise FileNotFoundError(msg)
    return instances


def tv_other_files(directory: str, classes: list[str]) -> int:
    """Files the torchvision walk sees in class folders but does not keep."""
    count = 0
    for target_class in classes:
        for _, _, fnames in os.walk(os.path.join(directory, target_class), followlinks=True):
            count += sum(not tv_has_file_allowed_extension(f, TV_IMG_EXTENSIONS) for f in fnames)
    return count


def samples_of(index: packer.SourceIndex) -> list[tuple[str, int]]:
    return [(index.path_of(item), item.label) for item in index.items]


def blob(n: int) -> bytes:
    """Files are never opened by the scan; distinct sizes make ``SourceItem.size`` checkable."""
    return b"x" * n


# ----------------------------------------------------------------------------- parity


@pytest.fixture
def tricky_tree(tmp_path: Path) -> Path:
    write_tree(tmp_path / "outside", {
        "linked_class/o1.jpg": blob(11),
        "linked_class/nested/o2.png": blob(12),
        "linked_class/nested/o3.txt": blob(13),
        "shared/s1.jpg": blob(14),
        "shared/deeper/s2.JPEG": blob(15),
        "img.jpg": blob(16),
    })
    spec = {
        # "class10" sorts before "class2"; a directory with an image name; odd extensions
        "class10/a.jpg": blob(1),
        "class10/folder.jpg/inner.png": blob(2),
        "class10/UPPER.JPG": blob(3),
        "class10/mixed.Png": blob(4),
        "class10/file.jpeg.txt": blob(5),
        "class10/noext": blob(6),
        "class10/webp_without_dot_webp": blob(7),
        # sorted(os.walk()) order differs from depth-first: " ", "-" and "." sort before "/"
        "class2/b.jpg": blob(21),
        "class2/sub/deep/c.png": blob(22),
        "class2/sub/g.tif": blob(23),
        "class2/sub-2/d.jpg": blob(24),
        "class2/sub 3/e.jpg": blob(25),
        "class2/sub.x/f.bmp": blob(26),
        "class2/link.jpg": Symlink("../../outside/img.jpg"),      # file symlink
        "class2/dangling.jpg": Symlink("nowhere.jpg"),           # dangling: still a "file"
        "class2/alias": Symlink("../apple"),                     # dir symlink to another class
        "class2/ext": Symlink("../../outside/shared"),           # dir symlink out of the tree
        "class2/ext again": Symlink("../../outside/shared"),     # the same target twice
        # string order of numbers, non-ASCII, a non-image file
        "apple/1.jpg": blob(31),
        "apple/10.jpg": blob(32),
        "apple/2.jpg": blob(33),
        "apple/ß.webp": blob(34),
        "apple/readme.md": blob(35),
        # upper case sorts before lower case
        "Zebra/é.png": blob(41),
        "Zebra/e.png": blob(42),
        "Zebra/E.PNG": blob(43),
        "Zebra/e.PPM": blob(44),
        "Zebra/x.pgm": blob(45),
        "Zebra/y.TIFF": blob(46),
        "Zebra/z.Webp": blob(47),
        "ünïcödé cls/ä ö.jpg": blob(51),
        "with space/ x .jpg": blob(52),
        "with space/tab\tname.jpeg": blob(53),
        # symlinked class directories: out of the tree, and onto another class
        "linked": Symlink("../outside/linked_class"),
        "alias_of_apple": Symlink("apple"),
        # files at the root are no class
        "root.jpg": blob(61),
        "labels.csv": blob(62),
    }
    return write_tree(tmp_path / "src", spec)


def test_parity_with_torchvision_on_a_tricky_tree(tricky_tree: Path) -> None:
    root = str(tricky_tree)
    classes, class_to_idx = tv_find_classes(root)
    expected = tv_make_dataset(root, class_to_idx, extensions=TV_IMG_EXTENSIONS)

    index = scan_imagefolder(root)

    assert list(index.classes) == classes
    assert index.class_to_idx == class_to_idx
    assert samples_of(index) == expected
    # the tree really exercises what it claims to
    assert classes == ["Zebra", "alias_of_apple", "apple", "class10", "class2", "linked",
                       "with space", "ünïcödé cls"]
    rel = [item.relpath for item in index.items]
    assert rel.index("class2/sub/g.tif") < rel.index("class2/sub 3/e.jpg") \
        < rel.index("class2/sub-2/d.jpg") < rel.index("class2/sub.x/f.bmp") \
        < rel.index("class2/sub/deep/c.png")  # not depth-first
    assert "class10/folder.jpg/inner.png" in rel and "class10/folder.jpg" not in rel
    assert "class2/dangling.jpg" in rel
    assert "class2/alias/10.jpg" in rel and "class2/ext again/deeper/s2.JPEG" in rel
    assert "linked/nested/o2.png" in rel
    assert rel[:7] == ["Zebra/E.PNG", "Zebra/e.PPM", "Zebra/e.png", "Zebra/x.pgm",
                       "Zebra/y.TIFF", "Zebra/z.Webp", "Zebra/é.png"]
    assert len(expected) == 40


def test_sizes_relpaths_and_report_of_the_tricky_tree(tricky_tree: Path) -> None:
    index = scan_imagefolder(tricky_tree)
    for item in index.items:
        path = index.path_of(item)
        assert item.relpath == os.path.relpath(path, tricky_tree).replace(os.sep, "/")
        assert "\\" not in item.relpath and not item.relpath.startswith("/")
        expected_size = os.stat(path).st_size if os.path.exists(path) else -1
        assert item.size == expected_size
    dangling = next(i for i in index.items if i.relpath == "class2/dangling.jpg")
    assert dangling.size == -1
    report = index.report
    assert report.root_files == 2
    assert report.other_files == tv_other_files(str(tricky_tree), list(index.classes))
    assert report.ignored_hidden == () and report.cut_symlink_loops == ()
    assert report.unreadable_dirs == ()
    assert index.root == str(tricky_tree)


def test_same_tree_gives_the_same_index(tricky_tree: Path) -> None:
    assert scan_imagefolder(tricky_tree) == scan_imagefolder(str(tricky_tree))


def test_relative_root_is_made_absolute(tricky_tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tricky_tree.parent)
    index = scan_imagefolder("src")
    assert index.root == str(tricky_tree)
    assert samples_of(index) == tv_make_dataset(str(tricky_tree), extensions=TV_IMG_EXTENSIONS)


def test_find_classes_matches_torchvision(tricky_tree: Path) -> None:
    assert find_classes(tricky_tree) == tv_find_classes(str(tricky_tree))[0]


def test_is_valid_file_replaces_the_extension_check_and_gets_full_paths(tricky_tree: Path) -> None:
    seen: list[str] = []
    oracle_seen: list[str] = []

    def wanted(path: str) -> bool:
        seen.append(path)
        return path.endswith((".txt", ".md", "noext"))

    def oracle_wanted(path: str) -> bool:
        oracle_seen.append(path)
        return path.endswith((".txt", ".md", "noext"))

    index = scan_imagefolder(tricky_tree, is_valid_file=wanted, allow_empty=True)
    expected = tv_make_dataset(str(tricky_tree), is_valid_file=oracle_wanted, allow_empty=True)
    assert samples_of(index) == expected
    assert seen == oracle_seen
    assert seen and all(os.path.isabs(p) and p.startswith(str(tricky_tree) + os.sep) for p in seen)
    assert {i.relpath for i in index.items} == {
        "class10/file.jpeg.txt", "class10/noext", "apple/readme.md", "alias_of_apple/readme.md",
        "class2/alias/readme.md", "linked/nested/o3.txt"}
    # the image files are not taken: is_valid_file replaces the extension check
    assert not any(i.relpath.endswith(".jpg") for i in index.items)


def test_is_valid_file_that_keeps_nothing_names_the_empty_classes(tricky_tree: Path) -> None:
    with pytest.raises(EmptySourceError, match="is_valid_file"):
        scan_imagefolder(tricky_tree, is_valid_file=lambda path: False)


def test_custom_extensions_are_case_insensitive(tricky_tree: Path) -> None:
    index = scan_imagefolder(tricky_tree, extensions=(".PNG",), allow_empty=True)
    expected = tv_make_dataset(str(tricky_tree), extensions=(".png",), allow_empty=True)
    assert samples_of(index) == expected
    assert {"Zebra/E.PNG", "Zebra/e.png", "class10/mixed.Png"} <= {i.relpath for i in index.items}


def test_no_extensions_and_no_is_valid_file_is_a_value_error(tricky_tree: Path) -> None:
    with pytest.raises(ValueError, match="extensions or is_valid_file"):
        scan_imagefolder(tricky_tree, extensions=None)


# ----------------------------------------------------------------------------- departures


@pytest.fixture
def hidden_tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "src", {
        ".ipynb_checkpoints/cat-checkpoint.jpg": blob(1),
        ".DS_Store": blob(2),
        "cat/a.jpg": blob(3),
        "cat/.ipynb_checkpoints/a-checkpoint.jpg": blob(4),
        "cat/._a.jpg": blob(5),
        "cat/.DS_Store": blob(6),
        "cat/.hidden/b.jpg": blob(7),
        "cat/sub/.c.png": blob(8),
        "cat/sub/c.png": blob(9),
        "dog/d.jpg": blob(10),
        "dog/.cache": Dir(),
    })


def _is_hidden_path(path: str, root: str) -> bool:
    return any(part.startswith(".") for part in Path(os.path.relpath(path, root)).parts)


def test_hidden_entries_are_ignored_by_default_and_reported(hidden_tree: Path) -> None:
    root = str(hidden_tree)
    index = scan_imagefolder(root)

    assert index.classes == ("cat", "dog")
    expected = [s for s in tv_make_dataset(root, {"cat": 0, "dog": 1}, extensions=TV_IMG_EXTENSIONS)
                if not _is_hidden_path(s[0], root)]
    assert samples_of(index) == expected
    assert [i.relpath for i in index.items] == ["cat/a.jpg", "cat/sub/c.png", "dog/d.jpg"]
    assert sorted(index.report.ignored_hidden) == sorted([
        ".ipynb_checkpoints", ".DS_Store", "cat/.ipynb_checkpoints", "cat/._a.jpg",
        "cat/.DS_Store", "cat/.hidden", "cat/sub/.c.png", "dog/.cache"])
    assert index.report.root_files == 0
    assert index.include_hidden is False
    assert find_classes(root) == ["cat", "dog"]


def test_include_hidden_gives_exact_torchvision_parity(hidden_tree: Path) -> None:
    root = str(hidden_tree)
    index = scan_imagefolder(root, include_hidden=True)
    classes, class_to_idx = tv_find_classes(root)
    assert list(index.classes) == classes == [".ipynb_checkpoints", "cat", "dog"]
    assert samples_of(index) == tv_make_dataset(root, class_to_idx, extensions=TV_IMG_EXTENSIONS)
    assert index.report.ignored_hidden == ()
    assert "cat/._a.jpg" in {i.relpath for i in index.items}
    assert index.include_hidden is True


def test_only_hidden_folders_means_no_class(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "src", {".ipynb_checkpoints/a.jpg": blob(1), ".git/x": blob(1)})
    with pytest.raises(EmptySourceError, match="class folder"):
        scan_imagefolder(root)
    with pytest.raises(EmptySourceError, match="'.git'"):
        scan_imagefolder(root, include_hidden=True)


@pytest.fixture
def loop_tree(tmp_path: Path) -> Path:
    write_tree(tmp_path / "outside", {"shared/s.jpg": blob(1), "shared/inner/t.jpg": blob(2)})
    return write_tree(tmp_path / "src", {
        "cls/a.jpg": blob(3),
        "cls/sub/b.jpg": blob(4),
        "cls/sub/loop": Symlink(".."),          # back to the class folder
        "cls/self": Symlink("."),               # to itself
        "cls/sub/deep/up2": Symlink("../.."),   # two levels up
        "cls/sub/deep/e.png": blob(5),
        "cls/ext": Symlink("../../outside/shared"),    # not a loop: followed
        "cls/ext2": Symlink("../../outside/shared"),   # same target again: followed again
        "other/c.jpg": blob(6),
        "other/to_cls": Symlink("../cls"),      # another class's folder: not a loop either
    })


LOOPS = ["cls/self", "cls/sub/deep/up2", "cls/sub/loop"]


@pytest.mark.timeout(30)
def test_a_directory_symlink_loop_is_walked_once(loop_tree: Path) -> None:
    index = scan_imagefolder(loop_tree)
    rel = [item.relpath for item in index.items]
    assert len(rel) == len(set(rel))
    assert sorted(index.report.cut_symlink_loops) == sorted(
        LOOPS + ["other/to_cls/self", "other/to_cls/sub/deep/up2", "other/to_cls/sub/loop"])
    assert rel == [
        "cls/a.jpg", "cls/ext/s.jpg", "cls/ext/inner/t.jpg", "cls/ext2/s.jpg",
        "cls/ext2/inner/t.jpg", "cls/sub/b.jpg", "cls/sub/deep/e.png",
        "other/c.jpg", "other/to_cls/a.jpg", "other/to_cls/ext/s.jpg",
        "other/to_cls/ext/inner/t.jpg", "other/to_cls/ext2/s.jpg",
        "other/to_cls/ext2/inner/t.jpg", "other/to_cls/sub/b.jpg", "other/to_cls/sub/deep/e.png",
    ]
    # Walking once is exactly torchvision on the same tree without the looping links.
    for link in LOOPS:
        os.unlink(loop_tree / link)
    assert samples_of(index) == tv_make_dataset(str(loop_tree), extensions=TV_IMG_EXTENSIONS)


# ----------------------------------------------------------------------------- errors


def test_missing_source(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="does not exist") as info:
        scan_imagefolder(tmp_path / "nope")
    assert isinstance(info.value, FileNotFoundError)
    assert isinstance(info.value, SourceError) and isinstance(info.value, PackerError)
    assert "nope" in str(info.value)


def test_source_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file.jpg").write_bytes(b"x")
    with pytest.raises(SourceNotFoundError, match="is not a directory"):
        scan_imagefolder(tmp_path / "file.jpg")


def test_no_class_folder(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "src", {"a.jpg": blob(1), "b.png": blob(1)})
    with pytest.raises(EmptySourceError, match="Couldn't find any class folder") as info:
        scan_imagefolder(root)
    assert isinstance(info.value, FileNotFoundError)
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmptySourceError, match="class folder"):
        scan_imagefolder(tmp_path / "empty")


def test_empty_class_is_an_error_naming_it(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "src", {
        "a/1.jpg": blob(1), "b_empty/notes.txt": blob(2), "b_empty/sub": Dir(),
        "c/2.png": blob(3), "d_empty": Dir()})
    with pytest.raises(EmptySourceError, match="'b_empty', 'd_empty'") as info:
        scan_imagefolder(root)
    assert "'a'" not in str(info.value) and "'c'" not in str(info.value)
    assert "allow" in str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(FileNotFoundError):  # torchvision raises the same builtin
        tv_make_dataset(str(root), extensions=TV_IMG_EXTENSIONS)


def test_allow_empty_keeps_the_class_index(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "src", {
        "a/1.jpg": blob(1), "b_empty/notes.txt": blob(2), "c/2.png": blob(3), "c/3.png": blob(4)})
    index = scan_imagefolder(root, allow_empty=True)
    assert index.classes == ("a", "b_empty", "c")
    assert [(i.relpath, i.label) for i in index.items] == [("a/1.jpg", 0), ("c/2.png", 2),
                                                            ("c/3.png", 2)]
    assert samples_of(index) == tv_make_dataset(str(root), extensions=TV_IMG_EXTENSIONS,
                                                allow_empty=True)
    assert index.report.other_files == 1


_SCAN_WITHOUT_DAC = DROP_DAC_PRELUDE + textwrap.dedent("""
    import packer
    try:
        packer.scan_imagefolder(sys.argv[1])
    except packer.EmptySourceError as err:
        print("ERROR", err)
    index = packer.scan_imagefolder(sys.argv[1], allow_empty=True)
    print("ITEMS", [i.relpath for i in index.items])
    print("UNREADABLE", list(index.report.unreadable_dirs))
""")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_unreadable_directories_are_reported(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "src", {"locked/a.jpg": blob(1), "open/b.jpg": blob(2),
                                         "open/sub/c.jpg": blob(3)})
    os.chmod(root / "locked", 0)
    os.chmod(root / "open" / "sub", 0)
    try:
        proc = subprocess.run([sys.executable, "-c", _SCAN_WITHOUT_DAC, str(root)],
                              env={**os.environ, "PACKER_TEST_PROBE": str(root / "locked" / "a.jpg")},
                              capture_output=True, text=True, timeout=50, check=False)
    finally:
        os.chmod(root / "locked", 0o755)
        os.chmod(root / "open" / "sub", 0o755)
    if proc.stdout.startswith("SKIP"):
        pytest.skip(f"cannot make file modes bind in a child: {proc.stdout.strip()}")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ERROR ") and "'locked'" in lines[0]
    assert "permission denied on 'locked'" in lines[0]
    assert lines[1:] == ["ITEMS ['open/b.jpg']", "UNREADABLE ['locked', 'open/sub']"]
