"""resolve_choice: one way a decoder and a resampler are chosen ('auto', a name, availability)."""

from __future__ import annotations

import re
from types import ModuleType

import pytest

from packer.errors import MissingExtraError
from packer.read import speedups
from packer.read.decoding import resolve_decoder
from packer.read.resampling import resolve_resampler
from packer.read.speedups import resolve_choice


def test_unknown_names_are_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=re.escape("decoder must be 'auto' or one of simplejpeg, pil, "
                                                   "not 'turbo'")):
        resolve_decoder("turbo")
    with pytest.raises(ValueError, match=re.escape("resampler must be 'auto' or one of opencv, torch, pil, "
                                                   "not 'lanczos'")):
        resolve_resampler("lanczos")
    with pytest.raises(ValueError, match=re.escape("engine must be 'auto' or one of a, b, not 'c'")):
        resolve_choice("engine", "c", ("a", "b"), fast="a", module="json", fallback="b")


def test_auto_takes_the_fast_option_only_where_its_module_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_choice("engine", "auto", ("a", "b"), fast="a", module="json", fallback="b") == "a"
    assert resolve_choice("engine", "auto", ("a", "b"), fast="a", module="no_such_module_here",
                          fallback="b") == "b"
    loaded: dict[str, ModuleType | None] = {"simplejpeg": None, "cv2": None}
    monkeypatch.setattr(speedups, "_load", loaded.get)
    monkeypatch.setattr(speedups, "_cv2_ready", None)
    assert (resolve_decoder("auto"), resolve_resampler("auto")) == ("pil", "torch")
    assert resolve_decoder("pil") == "pil"
    assert (resolve_resampler("torch"), resolve_resampler("pil")) == ("torch", "pil")


def test_the_fast_option_named_while_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speedups, "_load", lambda module: None)
    monkeypatch.setattr(speedups, "_cv2_ready", None)
    missing = ("decoder='simplejpeg' needs simplejpeg, which is not installed: "
               "pip install 'packer-shards[fast]'")
    with pytest.raises(MissingExtraError, match=re.escape(missing)):
        resolve_decoder("simplejpeg")
    with pytest.raises(MissingExtraError, match=re.escape("resampler='opencv' needs opencv-python-headless")):
        resolve_resampler("opencv")


def test_the_fast_option_named_while_present_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = ModuleType("simplejpeg")
    monkeypatch.setattr(speedups, "_load", lambda module: fake if module == "simplejpeg" else None)
    assert resolve_decoder("simplejpeg") == "simplejpeg" and resolve_decoder("auto") == "simplejpeg"
