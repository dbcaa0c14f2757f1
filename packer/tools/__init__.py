"""Layer 5, what users run on a finished dataset: info, verify, show, export, preview, bench, demo.

(:func:`packer.tools.bench.bench` is not re-exported here: the name is its module's.) Only
:mod:`~packer.tools.bench`, :mod:`~packer.tools.profiling` and :mod:`~packer.tools.demo.run`
import torch; names are imported on first use, so ``packer verify`` never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.tools.bench import BenchReport
    from packer.tools.demo.run import DemoReport, run_demo
    from packer.tools.export.writer import ExportResult, export_dataset
    from packer.tools.findings import Problem, VerifyReport
    from packer.tools.info import DatasetInfo, dataset_info, dataset_versions
    from packer.tools.preview.sheet import ContactSheet, make_contact_sheet, write_contact_sheet
    from packer.tools.publish import (
        PushResult,
        RemoteGcResult,
        collect_remote_garbage,
        pull_dataset,
        push_dataset,
    )
    from packer.tools.show import SampleInfo, sample_bytes, sample_info, save_sample
    from packer.tools.verify import verify_dataset

__all__ = ["BenchReport", "ContactSheet", "DatasetInfo", "DemoReport", "ExportResult", "Problem",
           "PushResult", "RemoteGcResult", "SampleInfo", "VerifyReport", "collect_remote_garbage",
           "dataset_info", "dataset_versions", "export_dataset", "make_contact_sheet", "pull_dataset",
           "push_dataset", "run_demo", "sample_bytes", "sample_info", "save_sample", "verify_dataset",
           "write_contact_sheet"]
_INTERNAL = "it is internal (its module may change in any release)"
__getattr__, __dir__ = lazy_exports(__name__, {
    ".info": ["DatasetInfo", "dataset_info", "dataset_versions"],
    ".verify": ["verify_dataset"],
    ".findings": ["Problem", "VerifyReport"],
    ".show": ["SampleInfo", "sample_bytes", "sample_info", "save_sample"],
    ".export.writer": ["ExportResult", "export_dataset"],
    ".preview.sheet": ["ContactSheet", "make_contact_sheet", "write_contact_sheet"],
    ".publish": ["PushResult", "RemoteGcResult", "collect_remote_garbage", "pull_dataset", "push_dataset"],
    ".bench": ["BenchReport"],
    ".demo.run": ["DemoReport", "run_demo"],
}, __all__, deprecated={
    "LoadProfile": (".profiling", _INTERNAL),
    "profile_loading": (".profiling", _INTERNAL),
    "sweep": (".tuning", _INTERNAL),
    "make_demo_tree": (".demo.tree", _INTERNAL),
})
