"""Writing a dataset from Python: :func:`~packer.conversion.writing.write` over any iterable of
sample dicts, spooled (:mod:`~packer.conversion.writing.spool`) and then converted as a source."""
