"""S3 and S3-compatible stores (MinIO, Ceph RGW, R2, ...): ``s3://bucket/prefix``, through s3fs."""

from __future__ import annotations

import os
from typing import Any

import s3fs  # noqa: F401 - the `remote` extra; a missing one names it (packer.store.urls)

from packer.store.remote import RemoteStore

__all__ = ["S3Store"]


class S3Store(RemoteStore):
    """An S3 bucket and prefix; credentials, region and endpoint as the AWS tools take them.

    ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``) points at an S3-compatible server; a
    plain ``http://`` endpoint works as it is. Retries are packer's own, so botocore and s3fs
    try once each (their retries would multiply ours). A key created only if it is absent (the
    lease) is sent with ``If-None-Match: *``, which AWS, MinIO and moto honour.
    """

    protocol = "s3"

    def fs_options(self, options: dict[str, Any]) -> dict[str, Any]:
        client = dict(options.pop("client_kwargs", {}) or {})
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint and "endpoint_url" not in client and "endpoint_url" not in options:
            client["endpoint_url"] = endpoint
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region and "region_name" not in client:
            client["region_name"] = region
        config = dict(options.pop("config_kwargs", {}) or {})
        config.setdefault("connect_timeout", min(self.timeout, 10.0))
        config.setdefault("read_timeout", self.timeout)
        config.setdefault("retries", {"total_max_attempts": 1, "mode": "standard"})
        return {"client_kwargs": client, "config_kwargs": config, **options}

    def _create(self, path: str, data: bytes) -> None:
        # PutObject with ``If-None-Match: *`` (AWS since 2024, MinIO, moto); botocore's call,
        # so any s3fs works. s3fs turns the 412 answer into FileExistsError.
        fs = self._fs()
        bucket, key, _ = fs.split_path(path)
        try:
            fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        finally:
            fs.invalidate_cache(path)  # a listing s3fs kept must show the new key

    def _new_fs(self) -> Any:
        fs = super()._new_fs()
        fs.retries = 1  # s3fs's own retry loop: ours is the one that counts
        return fs
