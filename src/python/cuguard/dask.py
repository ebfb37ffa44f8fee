"""Dask: every worker of a running ``distributed`` cluster under the shim, and one merged snapshot.

::

    from distributed import Client, LocalCluster
    import cuguard.dask

    client = Client(LocalCluster(n_workers=2))
    cuguard.dask.register(client)             # every worker restarted under the shim
    ...
    report = cuguard.dask.snapshot(client)    # {"merged": ..., "processes": [...]}

:func:`register` registers two plugins on the scheduler, so that they apply to the workers that run
now and to every worker that joins later:

- a nanny plugin (``restart = True``) whose ``setup`` gives the nanny the environment
  ``cuguard run`` would give a program (``LD_PRELOAD``, and ``LD_LIBRARY_PATH`` for the simulated
  driver, from :func:`cuguard._launcher.shim_env`) plus the report path, the limit and the
  ``CUGUARD_*`` settings of the client's environment. The nanny then restarts its worker, which
  starts under the shim. The variables go in the nanny's ``pre_spawn_env``: the environment the
  worker *process* starts with. distributed's own ``Environ`` plugin sets ``nanny.env`` instead,
  which the new process applies to itself once Python runs, too late for ``LD_PRELOAD`` and for
  the settings the shim reads when it loads. A worker already started with this environment is not
  restarted again.
- a worker plugin whose ``setup`` labels the worker's report with its name and address
  (``process.labels``: ``worker``, ``worker_address``).

Workers need a nanny (``LocalCluster(processes=True)``, the default; ``dask worker`` without
``--no-nanny``) and a start method that execs a new program (``spawn``, distributed's default), or
else a client and workers already running under ``cuguard run``.
"""

import os
import time
from typing import Any, Dict, List, Optional

from . import _abi, _launcher
from ._abi import CuguardError

__all__ = ["register", "snapshot", "DEFAULT_REPORT", "PLUGIN_NAME"]

#: The name both plugins are registered under.
PLUGIN_NAME = "cuguard"

#: The workers' report path when neither ``report`` nor ``CUGUARD_REPORT`` says otherwise, in the
#: client's working directory: ``%h`` the host and ``%p`` the worker's pid, so that no two workers
#: write the same file.
DEFAULT_REPORT = "cuguard.dask-worker.%h.%p.json"


try:
    from distributed.diagnostics.plugin import NannyPlugin, WorkerPlugin
except ImportError as e:  # pragma: no cover - distributed missing
    raise ImportError(
        "cuguard.dask needs Dask's distributed package (`pip install distributed`)"
    ) from e


def _worker_env(limit: Optional[Any], driver: str, report: Optional[str]) -> Dict[str, str]:
    """The variables a worker process starts with (see the module's documentation)."""
    return _launcher.worker_env(driver, report, DEFAULT_REPORT, limit)


class ShimNannyPlugin(NannyPlugin):
    """Starts the nanny's worker under the shim, with ``environ`` (see the module's
    documentation); restarts a running worker unless it was started with exactly ``environ``."""

    name = PLUGIN_NAME
    restart = True

    def __init__(self, environ: Dict[str, str]):
        self.environ = dict(environ)

    def setup(self, nanny):
        # The nanny keeps this plugin's own copy (unpickled for it), so `restart` is this
        # nanny's alone.
        started_with = getattr(nanny, "_cuguard_environ", None)
        nanny.pre_spawn_env.update(self.environ)
        nanny.env.update(self.environ)
        self.restart = started_with != self.environ
        nanny._cuguard_environ = dict(self.environ)


class LabelWorkerPlugin(WorkerPlugin):
    """Labels the worker's report with its name (``worker``) and address (``worker_address``)."""

    name = PLUGIN_NAME

    def setup(self, worker):
        from . import active, label

        if active():
            label("worker", str(worker.name))
            label("worker_address", str(worker.address))


def _worker_state() -> Dict[str, Any]:
    """What :func:`register` asks each worker after the restart."""
    from . import active, inactive_reason

    return {"active": active(), "why": inactive_reason(), "pid": os.getpid()}


def _not_under_shim(states: Dict[str, Dict[str, Any]]) -> List[str]:
    return [f"{address}: {s['why']}" for address, s in sorted(states.items()) if not s["active"]]


def register(
    client,
    limit: Optional[Any] = None,
    driver: str = "system",
    report: Optional[str] = None,
    timeout: float = 120,
) -> Dict[str, int]:
    """Makes every worker of ``client``'s cluster, now and to come, part of the run: restarted under
    the shim (``driver`` ``"system"``, or ``"sim"`` for the simulated driver), its report labelled
    with the worker's name and address and written to ``report`` (a ``CUGUARD_REPORT`` template
    that must hold ``%p``; default ``$CUGUARD_REPORT``, else :data:`DEFAULT_REPORT`; a relative
    path is taken from the client's working directory). ``limit`` (bytes with a unit, a share of the
    device, per device: what ``CUGUARD_LIMIT`` takes) is each worker's limit; without it,
    ``CUGUARD_LIMIT`` of the client's environment is passed on, as is every other ``CUGUARD_*``
    setting there.

    Returns once every worker is back and under the shim: ``{worker address: pid}``. Raises
    :class:`cuguard.CuguardError` naming the workers that are back but not under the shim (no
    nanny, a start method that does not exec, a shim that failed to load), or saying how many are
    not back after ``timeout`` seconds.
    """
    environ = _worker_env(limit, driver, report)
    before = len(client.scheduler_info(n_workers=-1)["workers"])
    client.register_plugin(ShimNannyPlugin(environ))
    deadline = time.monotonic() + timeout
    if before:
        client.wait_for_workers(before, timeout=timeout)
    client.register_plugin(LabelWorkerPlugin())
    while True:
        try:
            states = client.run(_worker_state)
        except OSError:  # a worker went away while asked (distributed's CommClosedError too)
            if time.monotonic() >= deadline:
                raise
            states = {}
        if len(states) >= before or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    # A worker that runs was started with the environment it has: asking again changes nothing.
    missing = _not_under_shim(states)
    if len(states) < before:
        missing.append(f"{before - len(states)} of {before} workers not back after {timeout:g} s")
    if missing:
        raise CuguardError(
            "cuguard.dask.register: workers not under the shim:\n  " + "\n  ".join(missing)
        )
    return {address: s["pid"] for address, s in sorted(states.items())}


def _worker_snapshot(held: bool = True) -> Optional[Dict[str, Any]]:
    """A worker's live report (with what holds each allocation, for ``held``), or None when it
    is not under the shim."""
    from . import active
    from . import snapshot as process_snapshot

    return process_snapshot(held=held) if active() else None


def snapshot(client, held: bool = True) -> Dict[str, Any]:
    """A live snapshot of every worker of ``client``'s cluster, and of this process when it runs
    under the shim, in one merged report as ``cuguard merge`` writes it (``docs/report.schema.json``,
    ``merged``): ``{"schema", "schema_version", "tool", "merged": {"created_unix_ms", "inputs"},
    "processes": [REPORT, ...]}``, the workers in address order and this process last; ``inputs``
    names where each came from (``dask-worker:ADDRESS``, ``client``). Each ``REPORT`` is a
    ``reason: "request"``, ``complete: false`` report, like :func:`cuguard.snapshot`'s; with
    ``held`` (the default) it says what holds each live allocation (``python.view``), so that an
    array a future keeps reads apart from the same memory idle in CuPy's or RMM's pool. Raises
    :class:`cuguard.CuguardError` naming the workers that are not under the shim."""
    from . import active
    from . import snapshot as process_snapshot

    reports = client.run(_worker_snapshot, held)
    missing = sorted(address for address, r in reports.items() if r is None)
    if missing:
        raise CuguardError(
            "cuguard.dask.snapshot: workers not under the shim (call cuguard.dask.register "
            "first): " + ", ".join(missing)
        )
    inputs: List[str] = []
    processes: List[Dict[str, Any]] = []
    for address in sorted(reports):
        inputs.append(f"dask-worker:{address}")
        processes.append(reports[address])
    if active():
        inputs.append("client")
        processes.append(process_snapshot(held=held))
    return {
        "schema": "cuguard-report",
        "schema_version": 1,
        "tool": {"name": "cuguard", "version": _abi.VERSION},
        "merged": {"created_unix_ms": int(time.time() * 1000), "inputs": inputs},
        "processes": processes,
    }
