"""Layer 4, what users run on a finished dataset: info, verify, show, export, preview, bench, demo.

(:func:`packer.tools.bench.bench` is not re-exported here: the name is its module's.) Only
:mod:`~packer.tools.bench`, :mod:`~packer.tools.profiling` and :mod:`~packer.tools.demo`
import torch; names are imported on first use, so ``packer verify`` never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.tools.bench import BenchReport
    from packer.tools.demo import DemoReport, run_demo
    from packer.tools.demo_tree import make_demo_tree
    from packer.tools.export import ExportResult, export_dataset
    from packer.tools.info import dataset_info
    from packer.tools.preview import ContactSheet, make_contact_sheet, write_contact_sheet
    from packer.tools.profiling import LoadProfile, profile_loading
    from packer.tools.show import SampleInfo, sample_bytes, sample_info, save_sample
    from packer.tools.tuning import sweep
    from packer.tools.verify import Problem, VerifyReport, verify_dataset

__all__ = ["BenchReport", "ContactSheet", "DemoReport", "ExportResult", "LoadProfile", "Problem",
           "SampleInfo", "VerifyReport", "dataset_info", "export_dataset",
           "make_contact_sheet", "make_demo_tree", "profile_loading", "run_demo", "sample_bytes",
           "sample_info", "save_sample", "sweep", "verify_dataset", "write_contact_sheet"]
__getattr__, __dir__ = lazy_exports(__name__, {
    ".info": ["dataset_info"],
    ".verify": ["Problem", "VerifyReport", "verify_dataset"],
    ".show": ["SampleInfo", "sample_bytes", "sample_info", "save_sample"],
    ".export": ["ExportResult", "export_dataset"],
    ".preview": ["ContactSheet", "make_contact_sheet", "write_contact_sheet"],
    ".bench": ["BenchReport"],
    ".tuning": ["sweep"],
    ".profiling": ["LoadProfile", "profile_loading"],
    ".demo": ["DemoReport", "run_demo"],
    ".demo_tree": ["make_demo_tree"],
}, __all__)
