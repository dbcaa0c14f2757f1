"""Azure Blob Storage: ``az://container/prefix``, through adlfs (the ``azure`` extra).

Credentials as Azure's tools take them (``AZURE_STORAGE_ACCOUNT_NAME`` with
``AZURE_STORAGE_ACCOUNT_KEY``, ``AZURE_STORAGE_CONNECTION_STRING`` or a service principal), or
``storage_options={"account_name": ..., ...}``.
"""

from __future__ import annotations

import adlfs  # noqa: F401 - the `azure` extra; a missing one names it (packer.store.urls)

from packer.store.remote import RemoteStore

__all__ = ["AzureStore"]


class AzureStore(RemoteStore):
    """An Azure Blob container and prefix."""

    protocol = "abfs"
