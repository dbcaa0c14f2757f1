"""Conversion with object storage at one end: publishing a local dataset's files to a URL in the
order no reader can catch half-done (:mod:`.publishing`, what ``packer push`` runs), and a
conversion whose DST is a URL, written through a bounded local staging folder whose shards are
uploaded as they finish (:mod:`.staging`, :mod:`.uploads`, :mod:`.to_url`)."""
