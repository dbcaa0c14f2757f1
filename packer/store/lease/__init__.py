"""Cross-host writer leases on put-if-absent: the claim, its holder record and the keeper
that renews it.

Every module here is internal; the public names are exported by ``packer``.
"""
