"""``packer demo``: a generated photo-like tree, converted, read back and timed.

Every module here is internal; the public names are exported by ``packer``.
"""
