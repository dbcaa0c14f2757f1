"""The node's bounded cache: files named by content, block fetching through it, its
directory's locks and byte count.

Every module here is internal; the public names are exported by ``packer``.
"""
