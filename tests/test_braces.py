"""Brace patterns of shard files: braceexpand's grammar (the reference), bounded, names kept as keys."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from imagetools import standard_spec, write_tree
from sourcekinds import write_webdataset

import packer
from packer.errors import SourceError, UnsafeKeyError
from packer.source.braces import MAX_NAMES, expand_braces
from packer.source.registry import expand_pattern

braceexpand = pytest.importorskip("braceexpand")

TABLE = [
    # escapes inside braces go once per level, as braceexpand strips them (a case hypothesis found)
    "{\\\\}", "{\\\\x}", "{x\\\\y,b}", "{a,{b\\\\\\\\c,d}}",
    "shards-{000..009}.tar", "{train,val}-{0..2}.tar", "{a,b{1..3}}", "a{,b}c", "{0..10..2}", "{10..0..3}",
    "{4..1}", "{2..-1}", "{07..10}", "{-05..3}", "{-0..3}", "{0..-05}", "{a..g..2}", "{Z..a}", "{z..A..3}",
    "{a..a}", "python{2.{5..7},3.{2,3}}", "x{}y", "{a}", "{a,b}{1..3}{x,y}", "{{a,b},c}", "{a,{b,{c,d}}}",
    r"{1\{2,3}", r"a\,b{c\,d,e}", r"\{a,b}", "{1..3..0}", "{,}", "{a,}b", "pre/{x,y}/post-{1..2}.tar",
    "{1..a}", "{..}", "{1..}", "{a..3}", "{{1..2}}", "}{",
]


def _reference(pattern: str) -> list[str] | None:
    try:
        return list(braceexpand.braceexpand(pattern))
    except braceexpand.UnbalancedBracesError:
        return None


def _mine(pattern: str) -> list[str] | None:
    try:
        return expand_braces(pattern)
    except SourceError as err:
        assert "unbalanced braces" in str(err)
        return None


@pytest.mark.parametrize("pattern", TABLE)
def test_patterns_expand_as_braceexpand_expands_them(pattern: str) -> None:
    assert _mine(pattern) == _reference(pattern)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["{", "}", ",", "..", "a", "Z", "b", "0", "07", "1", "3", "-", "\\", "x",
                                 "-0", "2"]), max_size=14).map("".join))
def test_generated_patterns_expand_as_braceexpand_expands_them(pattern: str) -> None:
    reference = _reference(pattern)
    if reference is not None and sum(1 for _ in reference) > 10_000:
        return
    try:
        mine = _mine(pattern)
    except UnsafeKeyError:  # a brace made a name that is no key: ".", "..", or one of those
        assert reference is not None and any(name in (".", "..") for name in reference)
        return
    assert mine == reference


def test_a_pattern_naming_too_many_files_is_refused_before_a_name_is_made() -> None:
    start = time.monotonic()
    with pytest.raises(SourceError, match=r"names 10,000,000,000 files, more than the 1,000,000 one pattern"):
        expand_braces("/data/shard-{0000000000..9999999999}.tar")
    with pytest.raises(SourceError, match="names 1,000,002 files"):
        expand_braces("{0..1000001}")
    with pytest.raises(SourceError, match="names 12 files, more than the 10"):
        expand_braces("{a,b,c}{1..4}", limit=10)
    assert time.monotonic() - start < 5
    assert len(expand_braces("{1..1000}{a..j}{0..99}", limit=MAX_NAMES)) == MAX_NAMES


def test_names_the_braces_make_must_stay_under_the_pattern_s_folder() -> None:
    assert expand_braces("/data/../shards/{a,b}.tar") == ["/data/../shards/a.tar", "/data/../shards/b.tar"]
    assert expand_braces("/data/{x,y}/s-{1..2}.tar") == ["/data/x/s-1.tar", "/data/x/s-2.tar",
                                                        "/data/y/s-1.tar", "/data/y/s-2.tar"]
    for crafted in ("/data/{..,x}/s.tar", "/data/{a/../..,b}/s.tar", "{/etc/passwd,a}", "/d/{a,\x1b[2J}.tar",
                    "/data/x{a,b}/{.,..}"):
        with pytest.raises(UnsafeKeyError, match="file name \\(from its braces\\)"):
            expand_braces(crafted)


def test_expand_pattern_globs_what_the_braces_leave_and_keeps_plain_paths(tmp_path: Path) -> None:
    for name in ("train-0.tar", "train-1.tar", "val-0.tar", "val-1.tar", "val-x.tar"):
        (tmp_path / name).write_bytes(b"")
    assert expand_pattern(f"{tmp_path}/{{train,val}}-[01].tar") == [
        f"{tmp_path}/{n}" for n in ("train-0.tar", "train-1.tar", "val-0.tar", "val-1.tar")]
    assert expand_pattern(f"{tmp_path}/val-*.tar")[-1] == f"{tmp_path}/val-x.tar"
    assert expand_pattern(f"{tmp_path}/plain.tar") == [f"{tmp_path}/plain.tar"]
    with pytest.raises(SourceError, match="unbalanced braces"):
        expand_pattern(f"{tmp_path}/train-{{0..1.tar")


def test_webdataset_shards_named_by_a_list_and_a_range_convert(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "src", standard_spec())
    shards = write_webdataset(tree, tmp_path / "wds", per_shard=4)
    assert len(shards) == 4
    pattern = f"{tmp_path}/wds/shard-{{{{000000..000001}},00000{{2..3}}}}.tar"
    assert expand_braces(pattern) == [str(s) for s in shards]
    assert packer.plan_conversion(pattern, to="lmdb").num_images == 14
    stepped = f"{tmp_path}/wds/shard-{{000000..000003..2}}.tar"
    assert packer.plan_conversion(stepped, to="lmdb").num_images == 8
