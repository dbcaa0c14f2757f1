"""Where a conversion to a URL stages its shards: a local folder per URL, which it leaves only
when the dataset is published (a killed run's folder is what ``resume`` goes on from).

By default ``$PACKER_STAGING/<16 hex of the URL's SHA-256>``, else under
``$XDG_CACHE_HOME/packer-staging`` or ``~/.cache/packer-staging``: beside the node cache, never
inside it (the cache evicts whatever it holds). The folder records the URL it stages for, so
that one given by hand for another URL is refused instead of mixing two datasets' shards.
"""

from __future__ import annotations

import hashlib
import os

from packer.conversion.receipts import UPLOADED_DIR
from packer.errors import OutputError
from packer.store.cache.node import user_cache_folder
from packer.store.durable import atomic_write_bytes

__all__ = ["STAGING_ENV", "check_staging", "claim_staging", "default_staging_root", "staging_folder"]

STAGING_ENV = "PACKER_STAGING"
_URL_NAME = "url"  # in the ledger folder, which exists from the first upload on


def default_staging_root() -> str:
    """$PACKER_STAGING if set, else $XDG_CACHE_HOME/packer-staging, else ~/.cache/packer-staging."""
    return user_cache_folder("packer-staging", STAGING_ENV)


def staging_folder(url: str, staging: str | os.PathLike[str] | None = None) -> str:
    """The staging folder for ``url``: ``staging`` itself when given, else one under
    :func:`default_staging_root` named by the URL's digest."""
    if staging is not None:
        return os.path.abspath(os.fspath(staging))
    name = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    return os.path.join(default_staging_root(), name)


def check_staging(folder: str, url: str) -> None:
    """Refuse ``folder`` when it stages for another URL than ``url``.

    Raises:
        OutputError: ``folder`` holds shards uploaded to another URL.
    """
    try:
        with open(os.path.join(folder, UPLOADED_DIR, _URL_NAME), encoding="utf-8") as handle:
            staged_for = handle.read().strip()
    except FileNotFoundError:
        return
    if staged_for != url:
        raise OutputError(f"The staging folder {folder!r} holds a conversion to {staged_for}, not {url}: "
                          "give another staging folder, or finish that one first.")


def claim_staging(folder: str, url: str) -> None:
    """Record that ``folder`` stages for ``url`` (once the conversion's slot in it is open: before,
    a file there would make it look like someone else's folder).

    Raises:
        OutputError: ``folder`` already holds shards uploaded to another URL.
    """
    check_staging(folder, url)
    record = os.path.join(folder, UPLOADED_DIR, _URL_NAME)
    if not os.path.exists(record):
        os.makedirs(os.path.dirname(record), exist_ok=True)
        atomic_write_bytes(record, f"{url}\n".encode())
