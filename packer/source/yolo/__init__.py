"""YOLO sets as a source (Ultralytics' ``images/<split>`` beside ``labels/<split>/*.txt``): one
label file parsed (labels.py), the class names from ``data.yaml`` or a classes file (names.py),
the source and its reader (source.py).

Every module here is internal; the source is chosen by name (``source_format="yolo"``) or detected.
"""
