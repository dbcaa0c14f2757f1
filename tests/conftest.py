"""Shared fixtures: the ``backend`` and ``codec`` parametrizations, ``any_backend`` (one backend,
for tests whose outcome does not depend on it), tree factories and a packed dataset.
The contract suites of every implementation are tests/test_contracts.py.

Every image is generated into ``tmp_path``; nothing binary is checked in.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import imagetools
from imagetools import Entry, standard_spec, write_tree

import packer
from packer.digests import DIGEST_VARIABLE
from packer.format.backends import Backend, backend_names, get_backend
from packer.format.codecs import Codec, codec_names, get_codec

MakeTree = Callable[..., Path]

#: Real S3 and HTTP servers on 127.0.0.1 for the remote-storage tests (tests/remote_fixtures.py);
#: packer.testing registers the marker of its contract suites' slow tests.
pytest_plugins = ["remote_fixtures", "packer.testing"]


#: The backend of :func:`any_backend`: tests whose outcome does not depend on the backend use it.
ANY_BACKEND = "lmdb"

#: Test modules whose datasets take packer's default checksum (BLAKE3 where its wheel is
#: installed: .ci/run's step 2 runs them so). Everywhere else new datasets are SHA-256 unless a
#: test names a digest: golden records, crafted manifests and 0.1 upgrades compare with SHA-256
#: datasets, and a suite must mean the same whatever extras are installed.
DEFAULT_DIGEST_MODULES = frozenset({"test_digests", "test_convert", "test_resume", "test_update",
                                    "test_array", "test_records_in_workers", "test_remote", "test_cache"})


@pytest.fixture(autouse=True, scope="module")
def _sha256_unless_the_default_is_tested(request: pytest.FixtureRequest) -> Iterator[None]:
    """``$PACKER_DIGEST`` set for the whole module (its class-scoped fixtures too, and what the
    tests start: subprocesses, Dask's workers), or unset where the default is tested."""
    with pytest.MonkeyPatch.context() as patch:
        if request.module.__name__.rpartition(".")[2] in DEFAULT_DIGEST_MODULES:
            patch.delenv(DIGEST_VARIABLE, raising=False)
        else:
            patch.setenv(DIGEST_VARIABLE, "sha256")
        yield


@pytest.fixture(params=backend_names())
def backend(request: pytest.FixtureRequest) -> Backend:
    """Every registered storage backend: the test runs once per backend.

    Use it only where the outcome depends on the backend: the test checks shard bytes or file
    names (a backend's suffix), a backend's own reader or writer (open handles, lock files,
    the class ``open_dataset`` picks), or an error only one backend can raise. Everything else
    (destination rules, options, skip reasons, planning, sources, sample order, pixels) takes
    :func:`any_backend` and runs once: what every backend must do with its bytes is checked for
    each backend, and for a plugin, by ``BackendContract`` (tests/test_contracts.py).
    """
    return get_backend(request.param)


@pytest.fixture
def any_backend() -> Backend:
    """One backend (lmdb), for a test that writes a dataset but whose outcome does not depend
    on which backend wrote it, so it runs once (see :func:`backend` for when to run per backend)."""
    return get_backend(ANY_BACKEND)


@pytest.fixture(params=codec_names())
def codec(request: pytest.FixtureRequest) -> Codec:
    """Every registered codec, with its default options."""
    return get_codec(request.param)


@pytest.fixture
def make_tree(tmp_path: Path) -> MakeTree:
    """Factory: ``make_tree(spec, name="src")`` writes ``spec`` under ``tmp_path/name``.

    ``spec`` maps relative POSIX paths to bytes, :class:`imagetools.Symlink` or
    :class:`imagetools.Dir`.
    """

    def make(spec: Mapping[str, Entry], name: str = "src") -> Path:
        return write_tree(tmp_path / name, spec)

    return make


@pytest.fixture
def standard_tree(make_tree: MakeTree) -> Path:
    """The tree of :func:`standard_spec` under ``tmp_path/src``."""
    return make_tree(standard_spec())


@pytest.fixture
def packed(standard_tree: Path, tmp_path: Path, backend: Backend) -> Path:
    """``standard_tree`` converted with each ``backend`` into ``tmp_path/dst`` (per backend: for
    tests of the backend's reader; the rest take :func:`packed_once`)."""
    dst = tmp_path / "dst"
    packer.convert(standard_tree, dst, to=backend.name)
    return dst


@pytest.fixture
def packed_once(standard_tree: Path, tmp_path: Path, any_backend: Backend) -> Path:
    """``standard_tree`` converted with :func:`any_backend` into ``tmp_path/dst``: for tests of
    the dataset's behaviour above the backend (indexing, transforms, pickling, loaders)."""
    dst = tmp_path / "dst"
    packer.convert(standard_tree, dst, to=any_backend.name)
    return dst


__all__ = ["MakeTree", "imagetools"]
