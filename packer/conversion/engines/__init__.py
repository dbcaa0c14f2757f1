"""Where conversion tasks run: the built-in process pool, or any ``concurrent.futures`` executor.

A conversion is a list of independent tasks (:class:`~packer.conversion.tasks.ShardTask`, or
segments of one). Each is idempotent: it writes under a name no other attempt uses and renames
into place, so running a task twice (a retry after a lost worker) gives the same bytes. An
:class:`Engine` (:mod:`~packer.conversion.engines.base`) runs such a list and reports back:

* :class:`LocalEngine` (:mod:`~packer.conversion.engines.local`; the default, no extra
  dependency): long-lived worker processes on this machine that pin a crashing decoder on its
  file;
* :class:`ExecutorEngine` (:mod:`~packer.conversion.engines.executor`): any executor whose
  ``submit(fn, *args)`` returns a ``concurrent.futures.Future``: a ``ProcessPoolExecutor``, or
  Dask's (:mod:`~packer.conversion.engines.dask_cluster`, the ``dask`` extra).

:func:`open_engine` (:mod:`~packer.conversion.engines.select`) opens one by name. Engines do not
change the output: the tasks and their bytes are the same on all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.conversion.engines.base import Engine, Progress
    from packer.conversion.engines.executor import ExecutorEngine
    from packer.conversion.engines.local import LocalEngine
    from packer.conversion.engines.select import EngineRequest, engine_names, open_engine, register_engine

__all__ = ["Engine", "EngineRequest", "ExecutorEngine", "LocalEngine", "Progress", "engine_names",
           "open_engine", "register_engine"]
__getattr__, __dir__ = lazy_exports(__name__, {
    ".base": ["Engine", "Progress"],
    ".executor": ["ExecutorEngine"],
    ".local": ["LocalEngine"],
    ".select": ["EngineRequest", "engine_names", "open_engine", "register_engine"],
}, __all__, deprecated={
    "ENGINES": (".select", "use packer.engine_names() and packer.register_engine()"),
    "ProgressChannel": (".base", "it is internal to the Dask engine"),
})
