"""Segmentation sets as a source: an image tree and a mask tree matched by stem (Pascal VOC,
Cityscapes, ADE20K, plain ``images/`` + ``masks/``). Where each layout keeps its files is
layouts.py; the source and its reader, source.py.

Every module here is internal; the source is chosen by name (``source_format="masks"``) or detected.
"""
