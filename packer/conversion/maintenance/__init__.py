"""Keeping a finished dataset: update (change detection, new versions), upgrade of older
formats, and garbage collection of versions nobody reads.

Every module here is internal; the public names are exported by ``packer``.
"""
