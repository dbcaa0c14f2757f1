"""Joint fast path (issue 27): crop, resize and flip a sample's image and, with the same
parameters, its masks and boxes; see :mod:`packer.read.joint.transforms`."""

from packer.read.joint.targets import BoxField, Targets, targets_for_schema
from packer.read.joint.transforms import (
    JointLetterbox,
    JointRandomResizedCropFlip,
    JointScaleJitterCrop,
    JointTransform,
)

__all__ = ["BoxField", "JointLetterbox", "JointRandomResizedCropFlip", "JointScaleJitterCrop",
           "JointTransform", "Targets", "targets_for_schema"]
