"""Contact sheets of a dataset: which samples, drawn as PNG or HTML.

Every module here is internal; the public names are exported by ``packer``.
"""
