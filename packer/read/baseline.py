"""Read an ImageFolder tree directly, as torchvision's ``ImageFolder`` does.

This is the baseline packer is measured against (``packer demo``, benchmarks) and a reference
for parity tests: same scan, same order, ``Image.open(f).convert("RGB")`` per sample.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from typing import Any

from PIL import Image
from torch.utils.data import Dataset

from packer.source.imagefolder import scan_imagefolder

__all__ = ["ImageFolderDataset", "pil_loader"]


def pil_loader(path: str) -> Image.Image:
    """Open an image file as RGB exactly as torchvision's ``pil_loader``."""
    with open(path, "rb") as handle:
        image = Image.open(handle)
        return image.convert("RGB")


class ImageFolderDataset(Dataset[tuple[Any, Any]]):
    """torchvision's ImageFolder restated on packer's scanner (no torchvision needed).

    ``exclude`` drops relative paths (for example a packed dataset's skipped files), so the
    two can be compared sample for sample. ``decode=False`` returns each file's bytes.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[int], Any] | None = None,
        *,
        is_valid_file: Callable[[str], bool] | None = None,
        allow_empty: bool = False,
        include_hidden: bool = False,
        exclude: Collection[str] = (),
        decode: bool = True,
    ) -> None:
        index = scan_imagefolder(root, is_valid_file=is_valid_file, allow_empty=allow_empty,
                                 include_hidden=include_hidden)
        skip = set(exclude)
        self.root = index.root
        self.classes = list(index.classes)
        self.class_to_idx = index.class_to_idx
        self.samples = [(index.path_of(item), item.label) for item in index.items
                        if item.relpath not in skip]
        self.targets = [target for _, target in self.samples]
        self.imgs = self.samples
        self.transform = transform
        self.target_transform = target_transform
        self.decode = decode

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        path, target = self.samples[index]
        if self.decode:
            sample: Any = pil_loader(path)
        else:
            with open(path, "rb") as handle:
                sample = handle.read()
        if self.transform is not None:
            sample = self.transform(sample)
        label: Any = target if self.target_transform is None else self.target_transform(target)
        return sample, label
