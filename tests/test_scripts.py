"""Every benchmark under scripts/ runs end to end on a tiny generated tree, so a refactor that
breaks one fails here. Smoke tests, with the smallest settings each script has; the figures are
not judged, only that the script finishes and reports what it says it reports.

Each script runs as ``python scripts/NAME ARGS`` would, but in this test process
(:func:`inprocess.run_file`): a fresh interpreter importing torch per script cost more than most
of these runs. The processes a script starts on purpose (bench_ffcv's case per process,
bench_memory's fresh processes) are still started. One script, faultproxy.py, also runs as its
own process, which keeps the scripts' ``python FILE`` entry covered end to end.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from imagetools import jpeg_bytes, write_tree
from inprocess import Ran, run_file, run_file_ok

import packer
from packer.read import speedups

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"


def run_script(name: str, *args: object, cwd: Path) -> Ran:
    """Run ``scripts/<name> ARGS`` in this process from ``cwd``; fail with its output unless it exits 0."""
    return run_file_ok(SCRIPTS / name, *args, cwd=cwd)


def run_script_process(name: str, *args: object, cwd: Path,
                       timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/<name>`` in a fresh interpreter, as users run it; fail unless it exits 0.

    The checkout goes first on ``PYTHONPATH`` so that the script imports this working tree's
    packer (as ``python scripts/x.py`` from the repository does), however packer is installed.
    """
    env = dict(os.environ)
    paths = [str(ROOT), *(os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    command = [sys.executable, str(SCRIPTS / name), *(str(arg) for arg in args)]
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                            check=False)
    assert result.returncode == 0, (f"{name} exited {result.returncode}\n--- stdout\n{result.stdout}"
                                    f"\n--- stderr\n{result.stderr}")
    return result


def tiny_tree(root: Path, per_class: int = 6, classes: tuple[str, ...] = ("ant", "bee"),
              broken: bool = False) -> Path:
    """``per_class`` small JPEGs per class (48x40: the benchmarks' 224 crops upsample them)."""
    spec: dict[str, Any] = {f"{cls}/{i:02d}.jpg": jpeg_bytes(48, 40, i + 10 * n)
                            for n, cls in enumerate(classes) for i in range(per_class)}
    if broken:
        spec[f"{classes[-1]}/broken.jpg"] = b"not a jpeg"
    return write_tree(root, spec)


def json_after(text: str, opening: str = "{") -> Any:
    """The JSON document that starts at the first line of ``text`` beginning with ``opening``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(opening))
    return json.loads("\n".join(lines[start:]))


def test_in_process_runs_put_the_process_back(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent("""\
        import os, sys, torch
        print("argv", sys.argv[1:], "cwd", os.getcwd(), "first on path", sys.path[0])
        print("warning", file=sys.stderr)
        os.environ["PACKER_CHILD"] = "1"
        os.chdir("/")
        torch.set_num_threads(1)
        torch.manual_seed(1)
        sys.exit(int(sys.argv[1]))
    """))
    threads = torch.get_num_threads()
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    torch.rand(1)
    work = tmp_path / "work"
    work.mkdir()
    ran = run_file(script, 3, "x", cwd=work, env={**os.environ, "ONLY_HERE": "1"})
    assert ran.returncode == 3 and ran.stderr == "warning\n"
    assert ran.stdout == f"argv ['3', 'x'] cwd {work} first on path {tmp_path}\n"
    assert "PACKER_CHILD" not in os.environ and "ONLY_HERE" not in os.environ
    assert os.getcwd() != "/" and torch.get_num_threads() == threads
    assert torch.equal(torch.rand(1), expected[1:])  # the RNG goes on where it was, unseeded by the file


def test_every_script_has_a_smoke_test() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    scripts = sorted(path.name for path in SCRIPTS.glob("*.py"))
    assert scripts, f"no scripts found under {SCRIPTS}"
    untested = [name for name in scripts
                if f'run_script("{name}"' not in source and f'run_script_process("{name}"' not in source]
    assert not untested, f"scripts without a smoke test in {Path(__file__).name}: {untested}"


@pytest.mark.timeout(180)
def test_bench_convert(tmp_path: Path) -> None:
    src = tiny_tree(tmp_path / "src")
    work = tmp_path / "work"
    work.mkdir()
    text = run_script("bench_convert.py", src, "--repeats", "1", "--workdir", work, cwd=tmp_path).stdout
    assert "12 images" in text and "1 interleaved repeats" in text
    assert re.search(r"case\s+images/s\s+MB/s\s+median s \(min-max\)", text), text
    cases = ("tar cf + sync", "check none, workers 1", "check none, workers 2", "check header, workers 1",
             "check header, workers 2", "check full, workers 1", "check full, workers 2")
    for case in cases:
        assert re.search(rf"^  {re.escape(case)}\s+\d+\s+[\d.]+\s+[\d.]+ \(", text, re.M), (case, text)
    assert re.search(r"--check none, 2 workers vs tar cf: [\d.]+x \(1 worker: [\d.]+x\)", text), text
    assert re.search(r"--check full, 2 workers vs 1: +[\d.]+x", text), text

    figures = json.loads(run_script("bench_convert.py", src, "--repeats", "1", "--workdir", work,
                                    "--backend", "hdf5", "--sources", "tree", "--json", cwd=tmp_path).stdout)
    assert figures["backend"] == "hdf5" and figures["images"] == 12 and figures["repeats"] == 1
    assert figures["cpus"] >= 1 and figures["source_bytes"] > 0 and figures["sources"] == ["tree"]
    assert list(figures["cases"]) == list(cases)
    assert all(case["median_s"] > 0 and case["images_per_s"] > 0 and case["vs_tar"] > 0
               for case in figures["cases"].values())
    assert set(figures["ratios"]) == {"check_none_workers2_vs_tar", "check_none_workers1_vs_tar",
                                      "check_full_workers2_vs_workers1"}
    assert not list(work.iterdir())  # the temporary work directory is gone

    # Another checksum algorithm: the same cases again, suffixed, and their ratio to the first.
    other = "blake3" if importlib.util.find_spec("blake3") else None
    digests = ["sha256", *([other] if other else [])]
    compared = json.loads(run_script("bench_convert.py", src, "--repeats", "1", "--workdir", work, "--checks",
                                     "none", "--digests", *digests, "--json", cwd=tmp_path).stdout)
    assert compared["digests"] == digests and "check none, workers 2" in compared["cases"]
    if other:
        assert "check none, workers 2 [blake3]" in compared["cases"]
        assert compared["ratios"]["blake3_vs_sha256_check_none_workers2"] > 0

    # Archive sources: the same tree as a tar and a zip, converted without extracting them.
    archives = json.loads(run_script("bench_convert.py", src, "--repeats", "1", "--workdir", work,
                                     "--checks", "none", "--sources", "tree", "tar", "zip", "--json",
                                     cwd=tmp_path).stdout)
    assert {"tar: check none, workers 2", "zip: check none, workers 1"} <= set(archives["cases"])
    assert {"tar_vs_tree_check_none_workers2", "zip_vs_tree_check_none_workers2"} <= set(archives["ratios"])
    assert not list(work.iterdir())


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bench_ffcv_runs_its_packer_cases_without_ffcv(tmp_path: Path) -> None:
    if importlib.util.find_spec("ffcv") is not None:
        pytest.skip("ffcv is importable here: this test covers the run without it")
    src = tiny_tree(tmp_path / "src")
    out = tmp_path / "figures.json"
    # One case per kind of loader the script builds (ImageFolder, packer standard, packer fast
    # path); each runs in a process of its own, so every case costs an interpreter and torch.
    cases = ["folder", "packer-std", "packer-fast-pixels256"]
    result = run_script("bench_ffcv.py", src, "--workdir", tmp_path / "work", "--reps", "1", "--epochs", "1",
                        "--workers", "0", "--batch-size", "4", "--max-reruns", "0",
                        "--cases", *cases, "ffcv-raw256", "--json", out, cwd=tmp_path)
    assert "FFCV is not importable here, so its cases are skipped" in result.stderr
    text = result.stdout
    assert "failed" not in text, result.stdout + result.stderr
    assert "1 reps x 1 epochs, 0 workers, batch 4" in text
    assert "| case | images/s | vs folder | vs FFCV, equal pixels |" in text
    for case in cases:
        assert re.search(rf"^\| {re.escape(case)} \| [\d,]+ \(", text, re.M), (case, text)
    assert "| ffcv" not in text
    figures = json.loads(out.read_text())
    assert sorted(figures["summary"]) == sorted(cases)
    assert all(row["median"] > 0 and len(row["reps"]) == 1 for row in figures["summary"].values())
    assert figures["summary"]["folder"]["vs_folder"] == 1.0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bench_fidelity(tmp_path: Path) -> None:
    src = tiny_tree(tmp_path / "src")
    result = run_script("bench_fidelity.py", src, "--limit", "4", "--size", "32", "--json", cwd=tmp_path)
    figures = json_after(result.stdout)
    assert set(figures) == {"default (auto)", "resampler=torch", "resampler=pil", "draft_gap=1",
                            "no fast extra (pil decode, torch resize)"}
    for name, row in figures.items():
        assert row["images"] == 4, (name, row)
        # The fast path stays close to torchvision's crops (about 40-80 dB here); a wrong box,
        # flip or channel order falls to 10-20 dB.
        assert math.isfinite(row["mad"]) and row["mad"] < 2, (name, row)
        assert row["psnr"] > 30 and row["psnr_p1"] > 25, (name, row)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bench_memory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    result = run_script("bench_memory.py", "--samples", "64", "--classes", "2", "--shard-samples", "32",
                        "--workers", "1", "--batch-size", "8", "--open-repeats", "1", "--workdir", work,
                        cwd=tmp_path)
    text = result.stdout
    assert "packer bench_memory: 64 samples, 2 classes, backend lmdb, 1 workers" in text
    assert "; 2 shards" in text
    assert "verify       verify_dataset: ok" in text
    assert re.search(r"open +median [\d.]+ m?s over 1 fresh processes", text), text
    assert re.search(r"epoch 0 +[\d.]+ s, [\d,]+ samples/s", text), text
    assert re.search(r"^  \d+ +[\d.]+ MB +[\d.]+ MB +[\d.]+ MB +[+-][\d.]+ MB", text, re.M), text  # a worker
    assert not list(work.iterdir())  # the dataset is removed without --keep


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bench_read_without_slowfs(tmp_path: Path) -> None:
    # A broken file: the conversions skip it and the folder side must leave it out too, or the
    # script refuses to compare sides of different sizes.
    src = tiny_tree(tmp_path / "src", broken=True)
    result = run_script("bench_read.py", src, "--workdir", tmp_path / "work", "--workers", "1",
                        "--batch-size", "4", "--repeats", "1", "--json", cwd=tmp_path)
    assert "skipping slowfs cases: no --slowfs given" in result.stderr
    text = result.stdout
    assert "workers=1 batch_size=4 repeats=1 limit=None" in text
    assert re.search(r"^case +description +folder img/s +packed img/s +ratio +target +met\?", text, re.M)
    ran = ["warm-std-lmdb", "warm-std-hdf5", "cold-std-lmdb", "cold-std-hdf5",
           "fast-original", "fast-jpeg256", "fast-pixels256"]
    for case in ran:
        assert re.search(rf"^{case} .* [\d.]+x ", text, re.M), (case, text)
    figures = json_after(text)
    assert [row["case"] for row in figures["results"]] == ran
    assert all(row["images"] == 12 and row["ratio"] > 0 for row in figures["results"])
    assert figures["skipped"] and all(name.startswith("slowfs") for name in figures["skipped"])


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bench_sampler(tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    converted = packer.convert(tiny_tree(tmp_path / "src"), dst, to="lmdb", shard_size="2KB", workers=1)
    shards = len(converted.manifest.shards)
    assert shards > 2
    result = run_script("bench_sampler.py", dst, "--epochs", "1", "--workers", "1", "--batch-size", "4",
                        "--block-size", "2", "--window", "2", "--limit", "8", "--json", cwd=tmp_path)
    report = json.loads(result.stdout)
    assert report["backend"] == "lmdb" and report["shards"] == shards
    assert report["samples_per_epoch"] == 8 and report["epochs"] == 1 and report["slowfs"] is False
    assert set(report["sides"]) == {"random", "block"}
    assert all(side["images_per_s"] > 0 for side in report["sides"].values())
    assert report["speedup"] > 0


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bench_transforms(tmp_path: Path) -> None:
    src = tiny_tree(tmp_path / "src")
    text = run_script("bench_transforms.py", src, "--limit", "4", "--repeats", "1", "--batch", "2",
                      "--size", "32", "--resize", "40", cwd=tmp_path).stdout
    assert "4 images from" in text and "(median 48x40), output 32, batch 2, 1 interleaved repeats" in text
    assert re.search(r"ms per image +worker +batch Normalize +all on CPU", text), text
    for name in ("train standard", "train fast", "eval standard", "eval fast"):
        assert re.search(rf"^  {name} +[\d.]+ +[\d.]+ +[\d.]+$", text, re.M), (name, text)
    for kind in ("train", "eval"):
        speedup = rf"{kind} speedup: [\d.]+x per worker \(Normalize on a GPU\), [\d.]+x all on the CPU"
        assert re.search(speedup, text), text


@pytest.mark.timeout(120)
def test_bench_opencv(tmp_path: Path) -> None:
    src = tiny_tree(tmp_path / "src")
    options = ("--limit", "8", "--repeats", "1", "--batch", "4", "--size", "32", "--resize", "40")
    result = run_script("bench_opencv.py", src, *options, "--json", cwd=tmp_path)
    report = json.loads(result.stdout)
    with_opencv = speedups.opencv() is not None
    resamplers = ["opencv", "torch"] if with_opencv else ["torch"]
    assert report["resamplers"] == resamplers
    assert with_opencv or "OpenCV is not importable here: its rows are skipped" in result.stderr
    assert report["images"] == 8 and report["median_size"] == [48, 40] and report["size"] == 32
    # Without simplejpeg, "no extra" (Pillow decodes, torch resizes) is the torch column.
    setups = resamplers + (["no extra"] if speedups.simplejpeg() is not None else [])
    assert list(report["setups"]) == setups
    for kind in ("train", "eval"):
        assert list(report["transforms"][kind]) == setups
        assert all(ms > 0 for ms in report["transforms"][kind].values())
    # 32x32 crops of 48x40 images: many are enlarged on both axes.
    assert report["enlarged_images"] > 0 and report["enlarged_share"] == report["enlarged_images"] / 8
    enlarged = report["enlarged"]
    assert set(enlarged["fused"]) == set(resamplers)
    steps = enlarged["resize"]
    assert list(steps) == [f"{r} (packer)" for r in resamplers] + ["torch plain bilinear", "pillow bilinear"]
    assert steps["pillow bilinear"]["mad"] == 0 and steps["pillow bilinear"]["max"] == 0  # the reference
    # Enlarging, torch's kernels follow Pillow's within rounding; a wrong box or flip is tens of levels off.
    for name in ("torch (packer)", "torch plain bilinear"):
        assert steps[name]["mad"] < 0.5 and steps[name]["max"] <= 2, (name, steps[name])
    assert all(row["ms"] > 0 for row in steps.values())
    for name, row in report["fidelity"].items():
        assert row["train_enlarged"] < 1 and row["train"] < 2 and row["eval"] < 2, (name, row)

    text = run_script("bench_opencv.py", src, *options, cwd=tmp_path).stdout
    assert "8 images from" in text and "(median 48x40), output 32, resize 40, 1 interleaved repeats" in text
    for label in ("train RandomResizedCropFlip", "eval CenterCropResize", "fused crop_resize on them"):
        assert re.search(rf"^  {label} +[\d.]+ ", text, re.M), (label, text)
    assert re.search(r"^  pillow bilinear +[\d.]+ +0\.00 +0$", text, re.M), text
    assert re.search(r"^  torch +[\d.]+ / [\d.]+ / [\d.]+$", text, re.M), text


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bench_update(tmp_path: Path) -> None:
    src = tiny_tree(tmp_path / "src", per_class=8, classes=("ant", "bee", "cow"))

    def tree(root: Path) -> dict[str, tuple[bytes, int]]:
        return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*")
                if p.is_file()}

    before = tree(src)
    work = tmp_path / "work"
    scenarios = ("a-added", "b-removed", "c-changed", "d-new-class", "e-added-1pct")
    # 3kB shards of ~1.8 kB images: the bounds hold on this tree and the script exits 0; it exits 1
    # when a bound fails or an update differs from a fresh conversion.
    text = run_script("bench_update.py", src, "--workdir", work, "--shard-size", "3kB", "--files", "3",
                      "--workers", "1", "--check", cwd=tmp_path).stdout
    assert "24 images; backend lmdb, shard size 3kB, --files 3, seed 0" in text
    assert re.search(r"^scenario +edit +files \+/-/~ +shards written/total +touched +bytes written +vs full "
                     r"+update s +vs full +bound +same as convert$", text, re.M), text
    for name in scenarios:
        row = (rf"^{name} .* [+]\d+/-\d+/~\d+ +\d+/\d+ +\d+ \([+-]\d+\) +[\d.]+ [kM]B +[\d.]+ % "
               rf"+[\d.]+ +[\d.]+x  ok \(<= \d+\) +equal$")
        assert re.search(row, text, re.M), (name, text)
    baseline = r"^full conversion \(baseline\): 24 images, \d+ shards, [\d.]+ [kM]B of shards, [\d.]+ s$"
    assert re.search(baseline, text, re.M), text
    assert "FAIL" not in text and "DIFFERENT" not in text
    # SRC untouched; the work directory keeps the copies and datasets it documents.
    assert tree(src) == before
    assert (work / "src").is_dir() and (work / "base" / "index.json").is_file()
    for name in scenarios:
        assert (work / name / "dst" / "index.json").is_file()
        assert (work / name / "fresh" / "index.json").is_file()
        assert set(json.loads((work / name / "edits.json").read_text())) == {"added", "removed", "changed",
                                                                            "new_class"}

    figures = json.loads(run_script("bench_update.py", src, "--workdir", work, "--shard-size", "3kB",
                                    "--files", "3", "--workers", "1", "--to", "hdf5", "--json",
                                    cwd=tmp_path).stdout)
    assert figures["backend"] == "hdf5" and figures["ok"] is True and figures["check"] is False
    assert figures["baseline"]["images"] == 24 and figures["baseline"]["seconds"] > 0
    rows = {row["scenario"]: row for row in figures["scenarios"]}
    assert list(rows) == list(scenarios)
    counts = {name: (row["files_added"], row["files_removed"], row["files_changed"])
              for name, row in rows.items()}
    assert counts == {"a-added": (3, 0, 0), "b-removed": (0, 3, 0), "c-changed": (0, 0, 3),
                      "d-new-class": (8, 0, 0), "e-added-1pct": (1, 0, 0)}
    for row in rows.values():
        assert row["bound_ok"] and row["shards_written"] <= row["bound"] and row["version"] == 2, row
        assert row["shards_written"] + row["shards_reused"] == row["shards_total"], row
        assert 0 <= row["bytes_vs_full"] and row["seconds"] > 0 and "equal" not in row, row


def test_faultproxy(tmp_path: Path) -> None:
    text = run_script_process("faultproxy.py", "--help", cwd=tmp_path).stdout
    assert "--upstream" in text and "--latency-ms" in text


@pytest.mark.slow
def test_bench_remote(tmp_path: Path) -> None:
    """tests/test_bench_remote.py checks every row; this only keeps the script's smoke run listed."""
    text = run_script("bench_remote.py", "--help", cwd=tmp_path).stdout
    assert "--latency-ms" in text and "--skip-peers" in text


@pytest.mark.timeout(180)
def test_rehearse_imagenet(tmp_path: Path) -> None:
    figures = json.loads(run_script("rehearse_imagenet.py", "--classes", "70", "--per-class", "3", "--work",
                                    tmp_path / "work", "--json", cwd=tmp_path).stdout)
    assert figures["index"]["members"] == 210 and figures["index"]["pool_vs_serial"] > 0
    assert figures["index"]["plain_vs_tarfile"] > 0 and figures["index"]["tarfile_s"] > 0
    assert figures["convert"]["images"] == 210 and figures["convert"]["peak_mb"] > 0
    assert figures["open"]["samples"] == 210 and figures["open"]["first_batch_s"] > 0


@pytest.mark.slow
def test_bench_nodes(tmp_path: Path) -> None:
    """tests/test_nodes.py runs it on two nodes of two ranks; this only keeps the script listed."""
    text = run_script("bench_nodes.py", "--help", cwd=tmp_path).stdout
    assert "--nodes" in text and "--ranks" in text and "--caches" in text


#: pip 23.2's words when the test and remote extras met a newer boto3 (issue 24), abridged.
_PIP_CONFLICT = """\
Collecting aiobotocore~=2.5.0 (from s3fs>=2023.6->packer-shards==0.2.0)
  Downloading aiobotocore-2.5.0-py3-none-any.whl (72 kB)
ERROR: Cannot install packer-shards and packer-shards[dask,docs,remote,test]==0.2.0 because these \
package versions have conflicting dependencies.

The conflict is caused by:
    packer-shards[dask,docs,remote,test] 0.2.0 depends on fsspec>=2023.6; extra == "remote"
    s3fs 2025.3.1 depends on fsspec==2025.3.1.*

To fix this you could try to:
1. loosen the range of package versions you've specified
"""


def _check_extras_module() -> Any:
    spec = importlib.util.spec_from_file_location("check_extras", SCRIPTS / "check_extras.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_check_extras_lists_every_documented_combination(tmp_path: Path) -> None:
    lines = run_script("check_extras.py", "--list", cwd=tmp_path).stdout.splitlines()
    module = _check_extras_module()
    extras = module.declared_extras()
    assert {"fast", "dask", "remote", "gcs", "azure", "parquet", "test", "docs"} <= set(extras)
    for name in extras:
        assert f"[{name}]" in lines, (name, lines)
    assert f"[{','.join(sorted(extras))}]" in lines, lines
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart_extras = re.search(r"pip install -e '\.\[([a-z,]+)\]' && python -m pytest", readme)
    assert quickstart_extras, "the README's test command installs no extras"
    assert f"[{','.join(sorted(quickstart_extras.group(1).split(',')))}]" in lines, lines
    assert "[remote] + boto3" in lines and "[fast,remote]" in lines, lines


def test_check_extras_names_pips_conflict() -> None:
    module = _check_extras_module()
    assert module.conflict_lines(_PIP_CONFLICT) == [
        "The conflict is caused by:",
        'packer-shards[dask,docs,remote,test] 0.2.0 depends on fsspec>=2023.6; extra == "remote"',
        "s3fs 2025.3.1 depends on fsspec==2025.3.1.*",
    ]
    # Without a conflict block, pip's ERROR lines are what there is to name.
    assert module.conflict_lines("Looking in indexes\nERROR: No matching distribution found for x\n") == [
        "ERROR: No matching distribution found for x"]


def test_check_extras_fails_naming_the_cause(tmp_path: Path) -> None:
    """Offline, nothing resolves: the script exits 1 and shows pip's error for the combination."""
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path)}
    ran = run_file(SCRIPTS / "check_extras.py", "--python", sys.executable, "--only", "parquet",
                   "--timeout", "120", cwd=tmp_path, env=env)
    assert ran.returncode == 1, ran
    assert re.search(r"^FAIL  \[parquet\] ", ran.stdout, re.M), ran.stdout
    assert "ERROR: No matching distribution found for setuptools" in ran.stdout, ran.stdout
    assert "1 of 1 combinations of extras do not resolve" in ran.stderr, ran.stderr


def test_bench_fields(tmp_path: Path) -> None:
    pytest.importorskip("albumentations")  # the baseline; CI's step 2 installs it
    text = run_script("bench_fields.py", "--images", "6", "--size", "64", "--repeats", "1", "--batch", "3",
                      "--workers", "0", "--work", tmp_path / "work", cwd=tmp_path).stdout
    assert "6 images of 640x480, output 64x64, 0 workers, batch 3" in text
    for task in ("detection", "segmentation"):
        line = (rf"^  local disk +{task} +folder +[\d.]+ +original +[\d.]+ \([\d.]+x\) "
                rf"+pixels +[\d.]+ \([\d.]+x\)$")
        assert re.search(line, text, re.M), text
    assert "slowfs" not in text  # only with --slowfs
    assert re.search(r"against the JPEGs \+ COCO file: original [\d.]+x +pixels [\d.]+x$", text, re.M), text
    assert "boxes within 1 px and labels): 6 of 6 samples" in text


def test_sampler_mixing(tmp_path: Path) -> None:
    text = run_script("sampler_mixing.py", "--classes", "20", "--per-class", "50", "--shard-samples", "100",
                      "--batch", "32", "--windows", "0.5", "0.1", "--epochs", "1", cwd=tmp_path).stdout
    rows = {m.group(1).strip(): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"^(\S.*?)\s+([\d.]+)\s+([\d.]+)$", text, re.M)}
    assert rows["RandomSampler (uniform)"][1] == 1.0
    wide = rows["ShardWindowSampler, window 0.5 (5 shards)"]
    narrow = rows["ShardWindowSampler, window 0.1 (1 shards)"]
    assert 1.0 >= wide[1] > narrow[1] > 0 and wide[0] > narrow[0]  # a larger window mixes more classes


def test_shuffle_accuracy(tmp_path: Path) -> None:
    text = run_script("shuffle_accuracy.py", "--classes", "4", "--per-class", "24", "--epochs", "1",
                      "--seeds", "1", "--windows", "0.5", "--root", str(tmp_path), cwd=tmp_path).stdout
    rows = {m.group(1).strip(): float(m.group(2))
            for m in re.finditer(r"^\| (.+?) \| ([\d.]+) \| [\d.]+-[\d.]+ \|$", text, re.M)}
    assert set(rows) == {"uniform (SeededRandomSampler)", "ShardWindowSampler, windows of 0.5"}
    assert all(0.0 <= score <= 1.0 for score in rows.values())
    assert "96 training images" in text and "4 classes; 32 test images" in text


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bench_convert_url(tmp_path: Path) -> None:
    """The four ways of converting a tar with object storage at either end, on a real S3-API
    server: each gives the baseline's shards, and reading the tar from its URL fetches it."""
    import shutil

    server = "rclone" if shutil.which("rclone") else "moto"
    figures = json.loads(run_script("bench_convert_url.py", "--quick", "--images", "40", "--repeats", "1",
                                    "--shard-size", "100KB", "--latency-ms", "0", "--server", server,
                                    "--root", tmp_path / "work", "--json", cwd=tmp_path).stdout)
    cases = {case["case"]: case for case in figures["cases"]}
    assert list(cases) == ["local -> local", "url -> local", "local -> url", "url -> url"]
    assert all(case["same_shards"] and case["median"] > 0 for case in cases.values())
    assert cases["local -> local"]["fetched_bytes"] == 0
    for case in ("url -> local", "url -> url"):  # the index walk's pass, the shards', and read-ahead
        # past shards of 100 KB (it reaches 1 MiB): a bound, not a figure (docs/performance.md has those)
        assert figures["tar_bytes"] <= cases[case]["fetched_bytes"] <= 4 * figures["tar_bytes"]


@pytest.mark.timeout(120)
def test_bench_targz(tmp_path: Path) -> None:
    """Both ways make the same spool (the script checks it) and both are timed."""
    figures = json.loads(run_script("bench_targz.py", "--images", "60", "--size", "32", "--repeat", "1",
                                    "--json", cwd=tmp_path).stdout)
    assert figures["images"] == 60 and figures["expanded_mb"] > figures["archive_mb"] > 0
    assert figures["twice_s"] > 0 and figures["once_s"] > 0 and figures["twice_vs_once"] > 0
