"""One options object: ConversionOptions is validated once, records the same plan as the keywords,
and every entry point (convert, convert_task, plan_conversion, the CLI) goes through it."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner
from imagetools import dataset_snapshot, mixed_tree

import packer
from packer.cli import cli
from packer.conversion.array_run import run_conversion_task
from packer.conversion.dryrun import dry_run, plan_conversion
from packer.conversion.options import ConversionOptions
from packer.conversion.run import run_conversion
from packer.errors import UnknownNameError
from packer.format.backends import Backend


def test_options_are_validated_when_built() -> None:
    with pytest.raises(UnknownNameError, match="Unknown backend 'zip'"):
        ConversionOptions(to="zip")
    with pytest.raises(UnknownNameError, match="Unknown codec 'webp'"):
        ConversionOptions(to="lmdb", codec="webp")
    with pytest.raises(UnknownNameError, match="has no option quality"):
        ConversionOptions(to="lmdb", codec="pixels", codec_options={"quality": 80})
    with pytest.raises(ValueError, match="check must be one of"):
        ConversionOptions(to="lmdb", check="some")
    with pytest.raises(ValueError, match="max_pixels must be positive"):
        ConversionOptions(to="lmdb", max_pixels=0)
    with pytest.raises(ValueError):
        ConversionOptions(to="lmdb", shard_size="lots")


def test_options_are_frozen_normalised_and_comparable() -> None:
    options = ConversionOptions(to="hdf5", shard_size="2MB", codec="jpeg", codec_options={"resize": 64})
    assert options.shard_size == options.shard_bytes == 2_000_000
    assert options.backend.suffix == ".h5" and options.stored_as.name == "jpeg"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.codec = "pixels"  # type: ignore[misc]
    again = ConversionOptions(**options.keywords())
    assert again == options and hash(again) == hash(options)
    assert again.recorded() == options.recorded()
    assert options.recorded()["codec_params"]["resize"] == 64
    assert pickle.loads(pickle.dumps(options)) == options
    assert ConversionOptions(to="lmdb", is_valid_file=lambda p: True).scan_filter == "is_valid_file"


def test_the_keyword_api_and_the_options_api_write_the_same_bytes(tmp_path: Path, backend: Backend) -> None:
    src = mixed_tree(tmp_path / "src", count=12)
    options = ConversionOptions(to=backend.name, shard_size="20KB", codec="jpeg",
                                codec_options={"quality": 80})
    by_keywords = packer.convert(src, tmp_path / "kw", workers=1, **options.keywords())
    by_options = run_conversion(src, tmp_path / "opt", options, workers=1)
    assert dataset_snapshot(tmp_path / "kw") == dataset_snapshot(tmp_path / "opt")
    assert by_keywords.manifest.extra["plan_fingerprint"] == by_options.manifest.extra["plan_fingerprint"]
    assert dry_run(src, options).to_dict() == plan_conversion(
        src, to=backend.name, shard_size="20KB", codec="jpeg", codec_options={"quality": 80}).to_dict()
    tasks = [run_conversion_task(src, tmp_path / "array", options, task_id=i, num_tasks=2, workers=1)
             for i in range(2)]
    assert sum(t.written for t in tasks) == len(by_options.manifest.shards)
    packer.merge(tmp_path / "array")
    assert dataset_snapshot(tmp_path / "array") == dataset_snapshot(tmp_path / "opt")


def test_cli_options_only_where_the_codec_takes_them(tmp_path: Path) -> None:
    src = mixed_tree(tmp_path / "src", count=4)
    runner = CliRunner()
    cases = [
        (["--resize", "8"], "--resize needs --codec jpeg or --codec pixels (the original codec stores "
                            "files untouched)."),
        (["--codec", "pixels", "--quality", "80"], "--quality needs --codec jpeg."),
    ]
    for flags, message in cases:
        result = runner.invoke(cli, ["convert", str(src), str(tmp_path / "dst"), "--to", "lmdb", *flags])
        assert result.exit_code == 2, result.output
        assert message in result.stderr
    assert not (tmp_path / "dst").exists()


def test_the_option_list_is_written_once_in_the_dataclass(tmp_path: Path) -> None:
    import inspect

    fields = [f.name for f in dataclasses.fields(ConversionOptions) if f.init]
    for function in (packer.convert, packer.convert_task, packer.plan_conversion):
        shown = inspect.signature(function).parameters
        assert all(name in shown and shown[name].kind is inspect.Parameter.KEYWORD_ONLY for name in fields)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) shardsize; the conversion "
                                        r"options are .*shard_size"):
        packer.convert(tmp_path / "src", tmp_path / "dst", to="lmdb", shardsize="1MB")
    with pytest.raises(TypeError, match="options= or option keywords, not both"):
        packer.plan_conversion(tmp_path, ConversionOptions(to="lmdb"), to="hdf5")
    assert not (tmp_path / "dst").exists()
