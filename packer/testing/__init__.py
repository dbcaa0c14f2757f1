"""Contract suites for packer's extension points, as pytest mixins a plugin author runs.

One mixin per kind of implementation checks every promise the library relies on; a plugin's
test module subclasses it with one line, and pytest collects every contract test::

    from packer.testing import BackendContract, CodecContract

    class TestMyBackend(BackendContract):
        backend = MY_BACKEND

    class TestMyCodec(CodecContract):
        codec = MyCodec(level=3)

* :class:`BackendContract` (:mod:`packer.testing.backends`): shard files, readers across
  processes, size arithmetic, conversions, ``verify``, crash and update safety;
* :class:`CodecContract` (:mod:`packer.testing.codecs`): encode/decode, parameters in the
  manifest, every backend, export;
* :class:`EngineContract` (:mod:`packer.testing.engines`): the local engine's bytes, progress
  counts, errors, Ctrl-C;
* :class:`StoreContract` (:mod:`packer.testing.stores`): every Store method, missing keys,
  pickling, a dataset read through the store;
* :class:`SourceContract` (:mod:`packer.testing.sources`): scanning, identities, readers, and a
  conversion equal to the equivalent tree's;
* :class:`FieldSourceContract` (:mod:`packer.testing.field_sources`): a source with fields
  (:func:`field_values` for each image): the dry run's schema, a conversion read back field for
  field, ``verify --against``, spawned workers.

An implementation that is not registered yet is registered for each test through the kind's
public register function and removed afterwards. Needs pytest (the ``test`` extra); ``import
packer`` never imports this package. Tests marked ``slow`` (kill-and-resume) take seconds each:
add ``pytest_plugins = ["packer.testing"]`` to your ``conftest.py`` to register that marker
(``pytest -m "not slow"`` then skips them).
"""

from __future__ import annotations

import pytest

from packer.testing.backends import BackendContract
from packer.testing.codecs import CodecContract
from packer.testing.engines import EngineContract
from packer.testing.field_sources import FieldSourceContract, field_values
from packer.testing.sources import SourceContract
from packer.testing.stores import StoreContract

__all__ = ["BackendContract", "CodecContract", "EngineContract", "FieldSourceContract", "SourceContract",
           "StoreContract", "field_values"]


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``slow`` marker, when this package is loaded as a pytest plugin."""
    config.addinivalue_line("markers", "slow: kill-and-resume contract tests that take seconds each")
