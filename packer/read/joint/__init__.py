"""Joint fast path (issue 27): crop, resize and flip a sample's image and, with the same
parameters, its masks, boxes and outlines; see :mod:`packer.read.joint.transforms`."""

from packer.read.joint.targets import BoxField, OutlineField, Targets, targets_for_schema
from packer.read.joint.transforms import (
    JointLetterbox,
    JointRandomResizedCropFlip,
    JointScaleJitterCrop,
    JointTransform,
)

__all__ = ["BoxField", "JointLetterbox", "JointRandomResizedCropFlip", "JointScaleJitterCrop",
           "JointTransform", "OutlineField", "Targets", "targets_for_schema"]
