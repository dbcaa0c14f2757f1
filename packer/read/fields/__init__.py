"""Reading samples with fields: a dict per sample (:mod:`~packer.read.fields.dataset`) and a
collate for fields of varying length (:mod:`~packer.read.fields.collate`)."""
