"""The fast path's optional accelerators: simplejpeg (JPEG decoding) and OpenCV (resizing).

Both are wheels with libjpeg-turbo or OpenCV inside, installed by the ``fast`` extra
(``pip install 'packer-shards[fast]'``): no compiler and no system library. Without them every
transform works the same way, only slower: Pillow decodes and torch resizes. ``"auto"``
choices in :mod:`packer.read.transforms` take an accelerator when it imports, so the same code runs
on machines with and without the extra; name a decoder or resampler to pin it.

simplejpeg's pixels equal Pillow's (both are libjpeg-turbo with the same settings; the tests
hold them equal), so the decoder is a speed choice only. OpenCV's resize is not PIL's filter
(see :mod:`packer.read.resampling` for how close it is).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Final

from packer.errors import MissingExtraError

__all__ = ["FAST_EXTRA", "accelerators", "opencv", "require", "resolve_choice", "simplejpeg"]

#: The ``pip install`` argument that brings the accelerators.
FAST_EXTRA: Final = "packer-shards[fast]"

_DISTRIBUTIONS: Final = {"simplejpeg": "simplejpeg", "cv2": "opencv-python-headless"}


@functools.cache
def _load(module: str) -> ModuleType | None:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def simplejpeg() -> ModuleType | None:
    """The ``simplejpeg`` module, or None when it is not installed."""
    return _load("simplejpeg")


_cv2_ready: ModuleType | None = None  # cv2, once held to one thread in this process


def _forget_cv2_setting() -> None:
    global _cv2_ready
    _cv2_ready = None


os.register_at_fork(after_in_child=_forget_cv2_setting)


def opencv() -> ModuleType | None:
    """The ``cv2`` module, or None when it is not installed.

    packer holds OpenCV to one thread (``cv2.setNumThreads(1)``) in each process where it
    uses it: OpenCV's thread pool does not survive ``fork`` (a DataLoader worker forked after
    the pool started hangs in its first resize), and one image's resize gains nothing from
    it. This is process-wide, as torch's own ``set_num_threads(1)`` in workers is.
    """
    global _cv2_ready
    if _cv2_ready is not None:
        return _cv2_ready
    cv2 = _load("cv2")
    if cv2 is not None:
        cv2.setNumThreads(1)
        _cv2_ready = cv2
    return cv2


def _module(module: str) -> ModuleType | None:
    """``module`` as packer uses it (OpenCV held to one thread), or None when not installed."""
    return opencv() if module == "cv2" else _load(module)


def require(module: str, what: str) -> ModuleType:
    """``module`` imported, or a :class:`MissingExtraError` saying how to install it for ``what``."""
    loaded = _module(module)
    if loaded is None:
        raise MissingExtraError(f"{what} needs {_DISTRIBUTIONS.get(module, module)}, which is not "
                                f"installed: pip install '{FAST_EXTRA}' (wheels only), or leave the "
                                "choice at 'auto' to use it when present.")
    return loaded


def resolve_choice(keyword: str, choice: str, choices: Sequence[str], *, fast: str, module: str,
                   fallback: str) -> str:
    """The option ``choice`` names among ``choices`` (the argument ``keyword``, for messages):
    ``"auto"`` is ``fast`` when its accelerator ``module`` imports, else ``fallback``; a named
    option is checked, and ``fast`` named while ``module`` is missing is refused.

    Raises:
        ValueError: ``choice`` is neither ``"auto"`` nor one of ``choices``.
        MissingExtraError: ``fast`` is named and ``module`` is not installed; names the extra.
    """
    if choice == "auto":
        return fast if _module(module) is not None else fallback
    if choice not in choices:
        raise ValueError(f"{keyword} must be 'auto' or one of {', '.join(choices)}, not {choice!r}")
    if choice == fast:
        require(module, f"{keyword}={choice!r}")
    return choice


def accelerators() -> dict[str, str | None]:
    """Each accelerator's installed version, or None: what ``"auto"`` will pick."""
    found = {"simplejpeg": simplejpeg(), "opencv": _load("cv2")}
    return {name: getattr(module, "__version__", "unknown") if module else None
            for name, module in found.items()}
