"""One exception family per mistake, errors that cross processes as themselves, and messages in
the library's terms that the command line shows with its flags."""

from __future__ import annotations

import ast
import errno
import inspect
import pickle
import re
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import packer
import packer.errors
from packer.cli import cli
from packer.cli.errors import cli_message
from packer.conversion.engines.base import TaskFailure, task_error
from packer.conversion.engines.dask_cluster import jobqueue_cluster
from packer.conversion.tasks import ShardTask
from packer.errors import (
    BadImageError,
    ConversionError,
    OutputError,
    PackerError,
    ShardWriteError,
    SourceError,
    UnknownNameError,
)

PACKAGE = Path(packer.__file__).parent

#: A value for each keyword-only field an error takes (a new field needs one here).
FIELD_VALUES: dict[str, Any] = {"path": "ant/001.jpg", "reason": "decode_error", "missing": ["shard-00001"],
                                "errno": errno.ENOSPC, "differing": ["ant/001.jpg (changed)"], "count": 3,
                                "key": "../outside.txt", "source": "DST/index.json"}


def _error_classes() -> list[type[PackerError]]:
    return [value for value in vars(packer.errors).values()
            if inspect.isclass(value) and issubclass(value, PackerError)]


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
def test_every_error_pickles_as_itself_with_its_fields_and_notes(cls: type[PackerError]) -> None:
    missing = [name for name in cls._fields if name not in FIELD_VALUES]
    assert not missing, f"add a sample value for {missing} to FIELD_VALUES"
    fields = {name: FIELD_VALUES[name] for name in cls._fields}
    error = cls("what happened, which path, what to do", **fields)
    error.__notes__ = ["while packing shard-00003 in '/dst'"]
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls and str(again) == str(error) and again.args == error.args
    assert {name: getattr(again, name) for name in fields} == fields
    assert again.__notes__ == error.__notes__ and again.exit_code == error.exit_code


def test_the_error_tree_lists_every_error() -> None:
    tree = packer.errors.__doc__ or ""
    for cls in _error_classes():
        assert re.search(rf"\b{cls.__name__}\b", tree), f"{cls.__name__} is not in packer.errors' tree"
        assert cls.__name__ in packer.errors.__all__


def test_a_write_failure_is_an_output_error_with_its_errno() -> None:
    error = ShardWriteError("Writing shard-00001 failed: the disk is full", errno=errno.ENOSPC, path="/d/x")
    assert isinstance(error, OutputError) and isinstance(error, OSError)
    assert error.errno == errno.ENOSPC and error.path == "/d/x" and str(error).startswith("Writing")
    assert not isinstance(error, packer.DatasetError)  # reading a shard fails with ShardError


def _task(tmp_path: Path, planned_bytes: int = 1000) -> ShardTask:
    return ShardTask(index=3, name="shard-00003", reader=None, dst=str(tmp_path),  # type: ignore[arg-type]
                     staging="", backend="lmdb", codec=None, check="full",  # type: ignore[arg-type]
                     max_pixels=1, strict=False, planned_bytes=planned_bytes, items=(), fingerprint="f",
                     inputs="", options={})


def _sent(error: Exception) -> TaskFailure:
    """``error`` as a worker sends it: caught, then through a pickle round trip."""
    try:
        raise error
    except Exception as caught:
        failure = TaskFailure.of(caught)
    return pickle.loads(pickle.dumps(failure))


def test_a_worker_error_keeps_its_type_and_learns_where(tmp_path: Path) -> None:
    raised = task_error(_task(tmp_path), _sent(SourceError("'/src/a.jpg' vanished during the conversion")))
    assert type(raised) is SourceError and "vanished" in str(raised)
    assert raised.__notes__ == [f"while packing shard-00003 in {str(tmp_path)!r}"]
    image_error = BadImageError("cannot be packed", path="a.jpg", reason="truncated")
    bad = task_error(_task(tmp_path), _sent(image_error))
    assert isinstance(bad, BadImageError) and (bad.path, bad.reason) == ("a.jpg", "truncated")


def test_a_full_disk_is_told_by_its_errno_not_its_words(tmp_path: Path) -> None:
    raised = task_error(_task(tmp_path), _sent(OSError(errno.ENOSPC, "Kein Platz auf dem Gerät")))
    assert isinstance(raised, ShardWriteError) and raised.errno == errno.ENOSPC
    assert "the disk is full" in str(raised) and "shard-00003" in str(raised)
    assert "resume=True" in str(raised)
    # No errno (LMDB's C extension): the file system says whether the shard still fits.
    fits = task_error(_task(tmp_path), _sent(ShardWriteError("mdb_txn_commit: failure", path="/x")))
    assert "the shard could not be written" in str(fits) and fits.errno is None
    huge = task_error(_task(tmp_path, planned_bytes=1 << 62), _sent(ShardWriteError("failure", path="/x")))
    assert "the disk is full" in str(huge) and "free on the file system" in str(huge)
    read_only = task_error(_task(tmp_path), _sent(OSError(errno.EROFS, "Read-only file system")))
    assert "read-only" in str(read_only) and read_only.errno == errno.EROFS


class _Unpicklable(Exception):
    def __init__(self, handle: Any) -> None:
        super().__init__("a bug holding a lock")
        self.handle = handle

    def __reduce__(self) -> Any:
        raise TypeError("cannot pickle a lock")


def test_a_bug_that_does_not_pickle_comes_back_as_its_traceback(tmp_path: Path) -> None:
    failure = _sent(_Unpicklable(object()))
    assert failure.error is None and "_Unpicklable: a bug holding a lock" in failure.trace
    raised = task_error(_task(tmp_path), failure)
    assert type(raised) is ConversionError and "a bug in packer" in str(raised)
    assert "_Unpicklable" in str(raised)


def test_unknown_names_list_the_choices() -> None:
    with pytest.raises(UnknownNameError, match="Unknown engine 'ray'; available: dask, local, pbs, slurm"), \
            packer.open_engine("ray"):
        pass
    with pytest.raises(UnknownNameError, match="Unknown batch system 'lsf'; available: pbs, slurm"):
        jobqueue_cluster("lsf", queue=None, walltime="01:00:00")


# ----------------------------------------------------------------------------- library terms


def _packer_flags() -> set[str]:
    def commands(group: click.Command) -> Any:
        for command in getattr(group, "commands", {}).values():
            yield command
            yield from commands(command)
    return {flag for command in commands(cli) for param in command.params
            if isinstance(param, click.Option) for flag in param.opts if flag.startswith("--")} - {"--help"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def test_library_messages_name_keywords_not_flags() -> None:
    """Outside packer/cli no string (docstrings aside) names a flag of a packer command: the
    library says ``resume=True``, the command line translates (packer.cli.errors)."""
    flag = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, sorted(_packer_flags()))) + r")(?![\w-])")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "cli":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                found += [f"{where}: {name}" for name in flag.findall(node.value)]
    assert not found, "library messages name command-line flags:\n" + "\n".join(found)


@pytest.mark.parametrize(("command", "message", "shown"), [
    ("convert", "convert again without strict=True to skip it", "convert again without --strict to skip it"),
    ("info", "finish it with convert(..., resume=True), or start again with overwrite=True.",
     "finish it with packer convert SRC DST --resume, or start again with --overwrite."),
    ("convert", 'jobs=, queue= only apply to open_engine("slurm") or open_engine("pbs")',
     "--jobs, --partition/--queue only apply to --engine slurm or --engine pbs"),
    ("convert", "use jobs= and cores=, not workers=4", "use --jobs and --job-cores, not --workers 4"),
    ("convert", "name it with label_column=, or source_format='parquet'",
     "name it with --label-column, or --source-format parquet"),
    ("show", "the data is damaged: run verify_dataset(deep=True).",
     "the data is damaged: run packer verify DST --deep."),
    ("merge", "run task(s) 1 of 3 again (convert_task(..., num_tasks=3, task_id=I)), then merge() again",
     "run task(s) 1 of 3 again (packer convert SRC DST --num-tasks 3 --task-id I), "
     "then packer merge DST again"),
    ("verify", "against= compares bytes; use deep=True", "--against compares bytes; use --deep"),
    ("convert", "n_workers=3 in x>=1 at http://h/?to=a, is_valid_file= and strict=False stay",
     "n_workers=3 in x>=1 at http://h/?to=a, is_valid_file= and strict=False stay"),
])
def test_the_command_line_shows_flags_for_keywords(command: str, message: str, shown: str) -> None:
    assert cli_message(message, cli, command) == shown
    assert cli_message(shown, cli, command) == shown  # translating twice changes nothing


def test_a_library_error_is_printed_with_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import packer.tools.info

    def failing(dst: str) -> None:
        raise packer.IncompleteDatasetError(f"{dst!r} is incomplete: finish it with "
                                            "convert(..., resume=True), or start again with overwrite=True.")

    monkeypatch.setattr(packer.tools.info, "dataset_info", failing)
    result = CliRunner().invoke(cli, ["info", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr == (f"Error: {str(tmp_path)!r} is incomplete: finish it with packer convert SRC DST "
                             "--resume, or start again with --overwrite.\n")


@pytest.mark.parametrize(("command", "module", "function", "expected"), [
    (["info", "D"], "packer.tools.info", "dataset_info", "Error: Interrupted.\n"),
    (["verify", "D", "-q"], "packer.tools.verify", "verify_dataset", "Error: Interrupted.\n"),
    (["export", "D", "OUT"], "packer.tools.export.writer", "export_dataset",
     "Error: Interrupted; the files exported so far are in OUT, each one whole: run the same command "
     "with --overwrite to export again.\n"),
    (["convert", "S", "D", "--to", "lmdb"], "packer.conversion.run", "run_conversion",
     "Error: Interrupted; a conversion in progress left DST incomplete: run the same command with "
     "--resume to finish it.\n"),
])
def test_ctrl_c_advises_resuming_only_what_can_be_resumed(
        command: list[str], module: str, function: str, expected: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(__import__(module, fromlist=[function]), function, interrupted)
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 130 and result.stderr == expected
