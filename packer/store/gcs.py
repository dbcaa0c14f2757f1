"""Google Cloud Storage: ``gs://bucket/prefix``, through gcsfs (the ``gcs`` extra).

Credentials as Google's tools take them (``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth``,
the metadata server), or ``storage_options={"token": ...}``.
"""

from __future__ import annotations

import gcsfs  # noqa: F401 - the `gcs` extra; a missing one names it (packer.store.urls)

from packer.store.remote import RemoteStore

__all__ = ["GCSStore"]


class GCSStore(RemoteStore):
    """A GCS bucket and prefix."""

    protocol = "gcs"
