"""DST's states (empty, foreign, in progress, interrupted, complete), the moves between
them, the lock, and what makes two conversions the same run (resume).

Every module here is internal; the public names are exported by ``packer``.
"""
