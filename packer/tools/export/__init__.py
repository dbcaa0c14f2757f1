"""Writing a packed dataset back out: as a tree or as a list, every name checked before
the first write.

Every module here is internal; the public names are exported by ``packer``.
"""
