"""Every text the command line prints: the ``format_*`` functions, one module per subject."""

from __future__ import annotations

from packer.cli.formatting.conversion import format_conversion, format_merge, format_plan, format_task
from packer.cli.formatting.dataset import (
    format_coco_export,
    format_export,
    format_field_stats,
    format_info,
    format_mask_export,
    format_sample_info,
    format_sheet,
    format_verify,
    format_webdataset_export,
    format_yolo_export,
)
from packer.cli.formatting.listing import MAX_LISTED, append_listing
from packer.cli.formatting.measure import format_bench, format_demo, format_profile, format_sweep
from packer.cli.formatting.versions import format_gc, format_update

__all__ = ["MAX_LISTED", "append_listing", "format_bench", "format_coco_export", "format_conversion",
           "format_demo",
           "format_export", "format_field_stats", "format_gc", "format_info", "format_mask_export",
           "format_merge", "format_plan",
           "format_profile",
           "format_sample_info", "format_sheet", "format_sweep", "format_task", "format_update",
           "format_verify", "format_webdataset_export", "format_yolo_export"]
