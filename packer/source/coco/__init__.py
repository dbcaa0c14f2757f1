"""COCO instances files (``annotations/instances_val2017.json`` plus its image folder) as a
source: the file parsed once (annotations.py), each image a sample with its boxes, box labels,
crowd flags, areas, segmentations and id (source.py).

Every module here is internal; the source is chosen by name (``source_format="coco"``) or detected.
"""
