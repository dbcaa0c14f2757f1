"""WebDataset shards as a source: tar members grouped into samples by key, labels from a
member or a JSON field.

Every module here is internal; the public names are exported by ``packer``.
"""
