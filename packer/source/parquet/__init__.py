"""Parquet image tables as a source (Hugging Face ``datasets`` layout): schema, row groups,
one row read per item.

Every module here is internal; the public names are exported by ``packer``.
"""
