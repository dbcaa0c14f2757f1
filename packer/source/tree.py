"""An ImageFolder tree as a source (``root/<class>/**/<image>``), and the reader of files under a
root that list files share.

Scanning is :func:`packer.source.imagefolder.scan_imagefolder`, torchvision's exact semantics.
"""

from __future__ import annotations

import os
from typing import ClassVar

from packer.digests import SHA256, DigestAlgorithm
from packer.errors import SourceError
from packer.source.base import ItemReader, Source, SourceIndex, SourceItem
from packer.source.imagecheck import image_dimensions
from packer.source.imagefolder import scan_imagefolder
from packer.source.sourcefile import UnpackableFile, read_source

__all__ = ["FileReader", "TreeSource"]


class FileReader(ItemReader):
    """Reads items as files under ``root`` (``root/<relpath>``).

    ``listed``: the items come from a list file, so a file that is not there is skipped as
    ``missing``; under a scanned tree a vanished file means the tree changed under the run.
    """

    def __init__(self, root: str, *, listed: bool = False) -> None:
        self.root = root
        self.listed = listed

    def where(self, relpath: str) -> str:
        """The file's path."""
        return os.path.join(self.root, *relpath.split("/"))

    def read(self, item: SourceItem) -> bytes:
        """The file's bytes; see :meth:`ItemReader.read`."""
        path = self.where(item.relpath)
        try:
            data = read_source(path)
        except FileNotFoundError as err:
            if self.listed:
                raise UnpackableFile("missing", f"listed, but there is no such file under {self.root!r}"
                                     ) from None
            raise SourceError(f"Source file {path!r} vanished during the conversion: restore it (or "
                              "re-plan with overwrite=True), then run the same conversion again with "
                              "resume=True.") from err
        except OSError as err:
            raise SourceError(f"Reading {path!r} failed: {err}. Fix the storage, then run the same "
                              "conversion again with resume=True.") from err
        if item.size >= 0 and len(data) != item.size:
            raise SourceError(f"Source file {path!r} changed during the conversion ({item.size} bytes "
                              f"when scanned, {len(data)} now): convert again with overwrite=True.")
        return data

    def dimensions(self, item: SourceItem) -> tuple[int, int] | None:
        """From the file's header alone (Pillow reads only what it needs)."""
        return image_dimensions(self.where(item.relpath))

    def digest(self, item: SourceItem, algorithm: DigestAlgorithm = SHA256) -> str:
        """The file's digest by ``algorithm`` (hex), streamed; ``""`` when it cannot be read."""
        try:
            return algorithm.file(self.where(item.relpath))
        except OSError:
            return ""

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, FileReader) and (self.root, self.listed) == (other.root, other.listed))

    def __hash__(self) -> int:
        return hash((self.root, self.listed))


class TreeSource(Source):
    """A folder of class folders, scanned in torchvision ``ImageFolder`` order."""

    kind: ClassVar[str] = "tree"
    takes: ClassVar[frozenset[str]] = frozenset({"include_hidden", "is_valid_file"})
    refuses_empty_classes: ClassVar[bool] = True  # a class folder without images, as ImageFolder

    def describe(self) -> str:
        """An ImageFolder tree."""
        return "an ImageFolder tree"

    def scan_filter(self) -> str:
        """``"is_valid_file"`` when the user's filter chose the files, else ``"extensions"``."""
        return "is_valid_file" if self.options.is_valid_file is not None else "extensions"

    def scan(self) -> SourceIndex:
        """:func:`~packer.source.imagefolder.scan_imagefolder` with this source's options."""
        return scan_imagefolder(self.location, is_valid_file=self.options.is_valid_file,
                                allow_empty=self.options.allow_empty,
                                include_hidden=self.options.include_hidden)

    def reader(self) -> ItemReader:
        """Reads ``root/<relpath>``."""
        return FileReader(os.path.abspath(self.location))
