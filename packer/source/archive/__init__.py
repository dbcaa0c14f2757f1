"""Archives as sources, never extracted: tar, tar.gz, zip and ImageNet's tar of tars indexed
once (member headers), members read by byte range; a compressed tar's stream checked and
spooled once per node.

Every module here is internal; the public names are exported by ``packer``.
"""
