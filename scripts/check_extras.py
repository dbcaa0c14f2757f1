#!/usr/bin/env python3
"""Resolve every combination of packer's extras that the docs name, in a fresh environment.

    python scripts/check_extras.py [--torch torch==2.13.0] [--timeout 300] [--jobs 2]
        [--python PY] [--only fast,remote ...] [--list]

A user's first command is ``pip install torch==2.13.0`` followed by ``pip install -e '.[...]'``
(or ``'packer-shards[...]'``) in a new virtual environment. Whether pip can resolve that depends
on what PyPI holds today, not on this repository alone: ``s3fs`` needs ``aiobotocore``, which pins
``botocore`` to a narrow range, while ``boto3`` (from the ``test`` extra, from moto, from LitData)
pins ``botocore`` to its own release, and an old pip gives up with ``ResolutionImpossible`` (or
backtracks for many minutes) instead of choosing a ``boto3`` that fits. So this asks pip itself.

It builds a new virtual environment in a temporary folder (or uses ``--python``, an interpreter
of an environment you made), installs ``--torch`` there first (as the README says: a bare
``torch`` requirement would pull a multi-GB CUDA build), then runs ``pip install --dry-run`` of
this checkout with each combination of extras:

* every extra of ``pyproject.toml`` alone, and all of them together;
* every extra set that README.md or a page of docs/ names in a ``pip install`` line
  (``'.[test,dask,docs,remote]'``, ``'packer-shards[fast,remote]'``, ...);
* ``remote`` beside ``boto3`` and beside moto's server: what a user's environment often adds,
  and what once made pip give up (:data:`BESIDE`).

It prints one line per combination (resolved or not, seconds, and the versions pip chose for the
packages that usually conflict), and for a failure the lines of pip's "The conflict is caused by"
block, or that pip was still backtracking after ``--timeout`` seconds. Exit status: 0 when every
combination resolves, 1 otherwise. Nothing is installed but torch in the temporary environment,
which is removed at the end. It needs the package index (it is a CI step, not a unit test).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import re
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The packages whose versions a line reports: the ones that pin each other.
WATCHED = ("s3fs", "gcsfs", "adlfs", "fsspec", "aiobotocore", "botocore", "boto3", "moto")

#: Packages users install beside an extra that meet its pins: boto3 (LitData, awscli and moto
#: bring it too) against the botocore range of s3fs's aiobotocore.
BESIDE: dict[tuple[str, ...], list[tuple[str, ...]]] = {("remote",): [("boto3",), ("moto[server]",)]}

#: An extras set in a pip install line: '.[a,b]', packer-shards[a,b], "packer-shards[a]".
_EXTRAS_IN_DOCS = re.compile(r"(?:packer-shards|\.)\[([a-z0-9_,\- ]+)\]")


#: pip names the last pair it tried, which hides the usual cause when s3fs meets boto3.
_BOTOCORE_HINT = ("hint: s3fs needs aiobotocore, which pins botocore to a narrow range, and boto3 pins "
                  "botocore to its own release; pip tries the newest boto3 first and gives up. Name "
                  "aiobotocore in the same requirement list before boto3 "
                  "(pyproject.toml's comment on `remote`)")


@dataclass(frozen=True)
class Resolution:
    """What ``pip install --dry-run`` said for one combination of extras."""

    extras: tuple[str, ...]
    beside: tuple[str, ...]
    ok: bool
    seconds: float
    versions: dict[str, str] = field(default_factory=dict)
    conflict: list[str] = field(default_factory=list)


def declared_extras(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The names under ``[project.optional-dependencies]``, in file order."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        from pip._vendor import tomli as tomllib  # pip has carried tomli since 21.2
    with open(pyproject, "rb") as file:
        data = tomllib.load(file)
    return list(data["project"]["optional-dependencies"])


def documented_extras(root: Path = ROOT) -> set[tuple[str, ...]]:
    """Every extras set that README.md or a docs/ page names in a ``pip install`` line."""
    found: set[tuple[str, ...]] = set()
    for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for line in page.read_text(encoding="utf-8").splitlines():
            if "pip install" not in line:
                continue
            for match in _EXTRAS_IN_DOCS.finditer(line):
                names = tuple(sorted(n.strip() for n in match.group(1).split(",") if n.strip()))
                if names:
                    found.add(names)
    return found


def combinations(root: Path = ROOT) -> list[tuple[str, ...]]:
    """Each extra alone, all together, and every set the docs name; sorted, no duplicates."""
    extras = declared_extras(root / "pyproject.toml")
    wanted = {(name,) for name in extras} | {tuple(sorted(extras))} | documented_extras(root)
    unknown = sorted({name for combo in wanted for name in combo} - set(extras))
    if unknown:
        raise SystemExit(f"check_extras: the docs name extras that pyproject.toml does not declare: "
                         f"{unknown}; fix the docs or add the extras")
    return sorted(wanted, key=lambda combo: (len(combo), combo))


def conflict_lines(pip_output: str) -> list[str]:
    """pip's own account of a failed resolution: the "conflict is caused by" block, else its errors."""
    lines = pip_output.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("The conflict is caused by"):
            block = [line.strip()]
            for following in lines[i + 1:]:
                if not following.strip():
                    break
                block.append(following.strip())
            return block
    errors = [line.strip() for line in lines if line.strip().startswith("ERROR")]  # also a subprocess's
    return errors or [line.strip() for line in lines[-5:] if line.strip()]


def resolve(python: str, case: tuple[tuple[str, ...], tuple[str, ...]], timeout: float) -> Resolution:
    """``pip install --dry-run -e ROOT[extras] BESIDE...`` with ``python``'s pip, and what it chose."""
    extras, beside = case
    target = f"{ROOT}[{','.join(extras)}]"
    with tempfile.TemporaryDirectory(prefix="packer-extras-report-") as scratch:
        # The report goes to a file, not stdout: --quiet would also hide pip's conflict block.
        report_path = Path(scratch) / "report.json"
        command = [python, "-m", "pip", "install", "--dry-run", "--report", str(report_path), "-e", target,
                   *beside]
        start = time.monotonic()
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return Resolution(extras, beside, False, time.monotonic() - start,
                              conflict=[f"pip was still backtracking after {timeout:.0f} s "
                                        "(resolution too deep)"])
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            output = proc.stdout + proc.stderr
            conflict = conflict_lines(output)
            if "s3fs" in output and "boto3" in output:
                conflict.append(_BOTOCORE_HINT)
            return Resolution(extras, beside, False, seconds, conflict=conflict)
        report = json.loads(report_path.read_text(encoding="utf-8"))
    chosen = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report["install"]}
    return Resolution(extras, beside, True, seconds, versions={k: chosen[k] for k in WATCHED if k in chosen})


def fresh_environment(folder: Path, torch: str) -> str:
    """A new virtual environment in ``folder`` holding only ``torch``; its interpreter's path."""
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    python = str(folder / "bin" / "python")
    proc = subprocess.run([python, "-m", "pip", "install", "--quiet", torch], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"check_extras: pip install {torch} failed in a fresh environment:\n"
                         f"{proc.stdout}{proc.stderr}")
    return python


def report(result: Resolution) -> str:
    """One line for a combination, plus pip's conflict block when it failed."""
    name = f"[{','.join(result.extras)}]" + "".join(f" + {pkg}" for pkg in result.beside)
    if result.ok:
        versions = " ".join(f"{k}={v}" for k, v in result.versions.items())
        return f"ok    {name:<40} {result.seconds:5.0f} s  {versions}"
    detail = "\n".join(f"        {line}" for line in result.conflict)
    return f"FAIL  {name:<40} {result.seconds:5.0f} s\n{detail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", default="torch==2.13.0",
                        help="what to install first (default: %(default)s)")
    parser.add_argument("--python", help="resolve with this interpreter's pip instead of a new environment")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds per combination (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2,
                        help="combinations resolved at once (default: %(default)s)")
    parser.add_argument("--only", action="append", default=[],
                        help="check this comma-separated extras set only (repeatable)")
    parser.add_argument("--list", action="store_true", help="print the combinations and exit")
    args = parser.parse_args(argv)

    combos = ([tuple(sorted(n for n in s.split(",") if n)) for s in args.only] if args.only
              else combinations())
    cases = [(combo, ()) for combo in combos]
    cases += [(combo, beside) for combo in combos for beside in BESIDE.get(combo, [])]
    if args.list:
        print("\n".join(f"[{','.join(combo)}]" + "".join(f" + {p}" for p in beside)
                        for combo, beside in cases))
        return 0
    with tempfile.TemporaryDirectory(prefix="packer-extras-") as scratch:
        python = args.python or fresh_environment(Path(scratch) / "venv", args.torch)
        pip_version = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True,
                                     check=True).stdout.split()[1]
        print(f"resolving {len(cases)} combinations of extras with pip {pip_version} "
              f"({'given' if args.python else 'fresh'} environment with {args.torch})", flush=True)
        failed = 0
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for result in pool.map(resolve, itertools.repeat(python), cases, itertools.repeat(args.timeout)):
                failed += not result.ok
                print(report(result), flush=True)
    if failed:
        print(f"{failed} of {len(cases)} combinations of extras do not resolve: a new user's "
              f"pip install fails the same way (see docs/getting-started.md#combining-extras)",
              file=sys.stderr)
        return 1
    print(f"all {len(cases)} combinations resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
