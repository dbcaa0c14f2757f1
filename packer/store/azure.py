"""Azure Blob Storage: ``az://container/prefix``, through adlfs (the ``azure`` extra).

Credentials as Azure's tools take them (``AZURE_STORAGE_ACCOUNT_NAME`` with
``AZURE_STORAGE_ACCOUNT_KEY``, ``AZURE_STORAGE_CONNECTION_STRING`` or a service principal), or
``storage_options={"account_name": ..., ...}``.
"""

from __future__ import annotations

from typing import Any

import adlfs  # noqa: F401 - the `azure` extra; a missing one names it (packer.store.urls)

from packer.store.remote import RemoteStore

__all__ = ["AzureStore"]


class AzureStore(RemoteStore):
    """An Azure Blob container and prefix."""

    protocol = "abfs"

    def _create(self, path: str, data: bytes) -> None:
        # adlfs uploads with ``overwrite=False`` as ``If-None-Match: *``: an existing blob is
        # refused with azure's ResourceExistsError.
        try:
            self._fs().pipe_file(path, data, overwrite=False)
        except Exception as err:
            if _already_there(err):
                raise FileExistsError(path) from err
            raise


def _already_there(err: Any) -> bool:
    """Whether ``err`` (or its cause) is azure's refusal to overwrite an existing blob."""
    while err is not None:
        if isinstance(err, FileExistsError) or type(err).__name__ == "ResourceExistsError":
            return True
        err = err.__cause__ or err.__context__
    return False
