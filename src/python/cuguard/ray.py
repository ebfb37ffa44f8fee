"""Ray: every worker process of a job under the shim, labelled, and one merged live snapshot.

::

    import cuguard.ray

    cuguard.ray.init(driver="sim", num_gpus=2)        # ray.init(...), its workers under the shim
    ...
    report = cuguard.ray.snapshot()                   # {"merged": ..., "processes": [...]}

or, with a ``ray.init`` of one's own (a running cluster: ``address="auto"``)::

    ray.init(address="auto", runtime_env=cuguard.ray.runtime_env(driver="system"))
    cuguard.ray.check()                               # every node's workers under the shim

How the workers get there: Ray's own ``runtime_env``. Its ``env_vars`` are the environment the
raylet starts each worker process of the job with (tasks and actors alike), so ``LD_PRELOAD``
(the shim), ``LD_LIBRARY_PATH`` (the simulated driver, for ``driver="sim"``), the Python bootstrap
and the ``CUGUARD_*`` settings apply from the process's first instruction, as under ``cuguard
run``. Its ``worker_process_setup_hook`` (:func:`_setup`, run in each worker before its first
task) labels the worker's report: ``ray_job``, ``ray_node``, ``ray_node_ip`` and
``ray_worker_id`` at once; then, when the worker first runs a task, ``ray_actor`` (the actor's
name, else its class) and ``ray_actor_id`` for an actor, ``ray_task`` (the tasks' names, in the
order first run) for a task worker, and ``worker``, which ``cuguard summary --by worker`` groups
by: the actor's name (an unnamed actor: ``CLASS:ID``, the first 8 digits of its id), or for a
task worker ``TASK:ID`` (its first task's name, the first 8 digits of the worker id).

Reports go to ``report`` (a ``CUGUARD_REPORT`` template holding ``%p``; by default
:data:`DEFAULT_REPORT` in the driver's working directory), and every worker writes a checkpoint
every ``checkpoint`` seconds, so that a worker killed with SIGKILL leaves its last one; a worker
that Ray ends through ``_exit`` (``ray.kill``, ``exit_actor``) writes its final report;
:func:`shutdown` has every worker write its report before ``ray.shutdown()``, which ends some
workers with SIGKILL.

:func:`snapshot` asks every live worker of the job for its report now: one task per node, pinned
there, finds the job's worker processes (by their ``CUGUARD_RAY_RUN``) and runs ``cuguard
snapshot PID`` on each, which works while the worker is busy in a task. Workers that ended are
read from their last report; a worker that ran a task and ended without one is named in
``merged.absent``.
"""

import errno
import glob
import json
import os
import secrets
import subprocess
import time
from typing import Any, Dict, List, Optional, Tuple

from . import _abi, _files, _launcher
from ._abi import CuguardError

__all__ = ["init", "runtime_env", "check", "snapshot", "shutdown", "DEFAULT_REPORT", "SETUP_HOOK"]

#: The workers' report path when neither ``report`` nor ``CUGUARD_REPORT`` says otherwise, in the
#: driver's working directory: ``%h`` the host and ``%p`` the worker's pid.
DEFAULT_REPORT = "cuguard.ray-worker.%h.%p.json"

#: The ``worker_process_setup_hook`` that labels each worker.
SETUP_HOOK = "cuguard.ray._setup"

#: The variable that marks the job's worker processes (its value: the run's id).
RUN_VARIABLE = "CUGUARD_RAY_RUN"

#: Default seconds between the workers' checkpoints.
DEFAULT_CHECKPOINT = 10

#: Where each worker says who it is, in Ray's key-value store (namespace, key prefix).
_KV_NAMESPACE = "cuguard"


#: The most task names ``ray_task`` lists.
_MAX_TASKS = 16

try:
    import ray
except ImportError as e:  # pragma: no cover - ray missing
    raise ImportError("cuguard.ray needs Ray (`pip install ray`)") from e


def _env_vars(
    driver: str, limit: Optional[Any], report: Optional[str], checkpoint: Optional[float]
) -> Dict[str, str]:
    """The variables each worker process starts with (see the module's documentation)."""
    env = _launcher.worker_env(driver, report, DEFAULT_REPORT, limit)
    if checkpoint is not None:
        env["CUGUARD_CHECKPOINT_SECS"] = f"{checkpoint:g}"
    run = os.environ.get("CUGUARD_RUN_ID") or f"ray-{secrets.token_hex(8)}"
    env["CUGUARD_RUN_ID"] = run
    env[RUN_VARIABLE] = run
    return env


def runtime_env(
    driver: str = "system",
    limit: Optional[Any] = None,
    report: Optional[str] = None,
    checkpoint: Optional[float] = DEFAULT_CHECKPOINT,
    base: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """A Ray ``runtime_env`` that runs every worker process of the job under the shim (``driver``
    ``"system"``, or ``"sim"`` for the simulated driver), labelled, writing to ``report`` (a
    ``CUGUARD_REPORT`` template holding ``%p``; default ``$CUGUARD_REPORT``, else
    :data:`DEFAULT_REPORT`; relative: from the driver's working directory), with ``limit`` (what
    ``CUGUARD_LIMIT`` takes; without it, the driver's ``CUGUARD_LIMIT`` is passed on, as is every
    other ``CUGUARD_*`` setting) and a checkpoint every ``checkpoint`` seconds (``None``: none).
    ``base`` is a ``runtime_env`` of one's own to add to: its ``env_vars`` are kept, cuguard's
    win where both set one; a ``worker_process_setup_hook`` of its own is refused."""
    env = dict(base or {})
    if env.get("worker_process_setup_hook") not in (None, SETUP_HOOK):
        raise ValueError(
            "the runtime_env has a worker_process_setup_hook of its own; cuguard.ray needs "
            f"{SETUP_HOOK!r} there (call yours from a hook of your own that calls "
            "cuguard.ray._setup() first)"
        )
    env_vars = dict(env.get("env_vars") or {})
    own = _env_vars(driver, limit, report, checkpoint)
    if env_vars.get("PYTHONPATH") and own.get("CUGUARD_PYTHON_BOOTSTRAP"):
        # The bootstrap's directory first, then the runtime_env's own path, then the driver's.
        boot = own["CUGUARD_PYTHON_BOOTSTRAP"]
        rest = [p for p in own.get("PYTHONPATH", "").split(os.pathsep) if p and p != boot]
        own["PYTHONPATH"] = os.pathsep.join([boot, env_vars["PYTHONPATH"], *rest])
    env_vars.update(own)
    env["env_vars"] = env_vars
    env["worker_process_setup_hook"] = os.environ.get("CUGUARD_TEST_RAY_HOOK") or SETUP_HOOK
    return env


def init(
    address: Optional[str] = None,
    *,
    driver: str = "system",
    limit: Optional[Any] = None,
    report: Optional[str] = None,
    checkpoint: Optional[float] = DEFAULT_CHECKPOINT,
    timeout: float = 60,
    runtime_env: Optional[Dict[str, Any]] = None,  # noqa: F811 - the argument of ray.init
    **ray_init: Any,
):
    """``ray.init(address, runtime_env=..., **ray_init)`` with the job's workers under the shim
    (:func:`runtime_env`'s arguments), then :func:`check` with ``timeout``. ``address``: a running
    cluster's (``"auto"``, ``"ray://…"``, ``"HOST:PORT"``), or ``None`` for a new local one.
    Returns what ``ray.init`` returned."""
    env = globals()["runtime_env"](driver, limit, report, checkpoint, base=runtime_env)
    context = ray.init(address=address, runtime_env=env, **ray_init)
    try:
        check(timeout=timeout)
    except BaseException:
        ray.shutdown()
        raise
    return context


def _job_run() -> str:
    """The run id of this job's workers, from the job's runtime_env."""
    env = ray.get_runtime_context().runtime_env or {}
    run = (env.get("env_vars") or {}).get(RUN_VARIABLE)
    if not run:
        raise CuguardError(
            "this Ray job's workers are not under cuguard: start it with cuguard.ray.init(...) or "
            "ray.init(runtime_env=cuguard.ray.runtime_env(...))"
        )
    return run


def _alive_nodes() -> List[Dict[str, Any]]:
    return sorted(
        (n for n in ray.nodes() if n.get("Alive")),
        key=lambda n: (n.get("NodeManagerAddress", ""), n["NodeID"]),
    )


def _node_name(node: Dict[str, Any]) -> str:
    return f"node {node.get('NodeManagerAddress', '?')} ({node['NodeID'][:8]})"


def _on_node(function, node: Dict[str, Any]):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return ray.remote(function).options(
        num_cpus=0,
        max_retries=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
    )


def _worker_state() -> Dict[str, Any]:
    """What :func:`check` asks one worker of each node."""
    from . import inactive_reason

    return {"why": inactive_reason(), "pid": os.getpid()}


def _gather(tasks: Dict[str, Any], timeout: float) -> Tuple[Dict[str, Any], List[str]]:
    """The results of ``{node name: ObjectRef}`` within ``timeout`` seconds, and for each node
    whose task failed or did not finish, a line saying so."""
    pending = {ref: name for name, ref in tasks.items()}
    ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
    results: Dict[str, Any] = {}
    failed: List[str] = []
    for ref, name in pending.items():
        ready, _ = ray.wait([ref], timeout=0)
        if not ready:
            ray.cancel(ref, force=True)
            failed.append(
                f"{name}: no answer in {timeout:g} s (no worker of the job could start there, "
                "or its task did not end)"
            )
            continue
        try:
            results[name] = ray.get(ref)
        except Exception as e:  # the task's or its worker's error, as Ray gives it
            first = [line for line in str(e).splitlines() if line.strip()]
            cause = next(
                (line.strip() for line in reversed(first) if "Error" in line or "error" in line),
                first[-1].strip() if first else type(e).__name__,
            )
            if isinstance(e, ray.exceptions.WorkerCrashedError):
                cause += (
                    " (a worker whose setup hook, cuguard.ray._setup, cannot be imported ends so: "
                    "is cuguard installed there, for the workers' Python? The raylet's message "
                    "above says why)"
                )
            failed.append(f"{name}: its worker failed ({type(e).__name__}): {cause}")
    return results, failed


def check(timeout: float = 60) -> Dict[str, int]:
    """Runs one task on every live node of the cluster, in a worker of this job, and returns once
    each says it runs under the shim: ``{node: pid}`` (``node``: ``node IP (ID)``). Raises
    :class:`cuguard.CuguardError` naming each node where it does not (cuguard not installed there,
    so that the worker's setup hook cannot import it; the shim's path missing there; a shim of
    another version) or where no worker came within ``timeout`` seconds."""
    _job_run()
    nodes = _alive_nodes()
    tasks = {_node_name(n): _on_node(_worker_state, n).remote() for n in nodes}
    results, failed = _gather(tasks, timeout)
    for name, state in sorted(results.items()):
        if state["why"] is not None:
            failed.append(f"{name}: its worker (pid {state['pid']}) is not under the shim: {state['why']}")
    if failed:
        raise CuguardError("cuguard.ray: workers not under the shim:\n  " + "\n  ".join(sorted(failed)))
    return {name: state["pid"] for name, state in sorted(results.items())}


# --- In each worker ---------------------------------------------------------------------------


class _Labels:
    """This worker's labels after its first task, and its entry in Ray's key-value store."""

    def __init__(self, base: Dict[str, str]):
        self.base = base
        self.tasks: List[str] = []
        self.actor = False

    def first_run(self, descriptor: Any) -> None:
        from . import label

        if (getattr(descriptor, "module_name", "") or "").startswith("cuguard."):
            return  # cuguard's own tasks (check, snapshot) say nothing of the worker
        context = ray.get_runtime_context()
        actor_id = context.get_actor_id()
        labels: Dict[str, str] = {}
        if actor_id and not self.actor:
            self.actor = True
            name = context.get_actor_name() or ""
            cls = getattr(descriptor, "class_name", "") or "actor"
            labels["ray_actor"] = name or cls
            labels["ray_actor_id"] = actor_id
            labels["worker"] = name or f"{cls}:{actor_id[:8]}"
        elif not actor_id:
            task = context.get_task_name() or getattr(descriptor, "function_name", "") or "task"
            if task in self.tasks or len(self.tasks) >= _MAX_TASKS:
                return
            self.tasks.append(task)
            labels["ray_task"] = ", ".join(self.tasks)
            if len(self.tasks) == 1:
                labels["worker"] = f"{task}:{self.base['ray_worker_id'][:8]}"
        else:
            return
        for key, value in labels.items():
            label(key, value)
        self.base.update(labels)
        self._register()

    def _register(self) -> None:
        """Says who this worker is in Ray's key-value store, so that :func:`snapshot` can tell a
        worker that ended without a report."""
        try:
            from ray.experimental.internal_kv import _internal_kv_put

            run = os.environ.get(RUN_VARIABLE, "")
            entry = dict(self.base, pid=str(os.getpid()), report=os.environ.get("CUGUARD_REPORT", ""))
            _internal_kv_put(
                f"{run}/{self.base['ray_worker_id']}",
                json.dumps(entry),
                overwrite=True,
                namespace=_KV_NAMESPACE,
            )
        except Exception:  # the registry is a help, never a reason for the task to fail
            pass


def _setup() -> None:
    """The workers' ``worker_process_setup_hook`` (see the module's documentation)."""
    from . import active, label

    if not active():
        return
    context = ray.get_runtime_context()
    base = {
        "ray_job": context.get_job_id(),
        "ray_node": context.get_node_id(),
        "ray_worker_id": context.get_worker_id(),
    }
    try:
        base["ray_node_ip"] = ray.util.get_node_ip_address()
    except Exception:
        pass
    for key, value in base.items():
        label(key, value)
    labels = _Labels(base)
    # Ray asks its function manager for a function's code the first time this worker runs it
    # (an actor's class at its creation): the moment to learn the actor's or the task's name.
    # It is Ray's own inside: where it is not there, the worker keeps the labels above.
    try:
        manager = ray._private.worker.global_worker.function_actor_manager
        original = manager.get_execution_info
    except AttributeError:
        return

    def get_execution_info(job_id, descriptor):
        info = original(job_id, descriptor)
        try:
            labels.first_run(descriptor)
        except Exception:
            pass
        return info

    manager.get_execution_info = get_execution_info


# --- The snapshot ------------------------------------------------------------------------------


def _environ(pid: int) -> Dict[bytes, bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            env[key] = value
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has ended.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _last_report(
    template: str, pid: int, run: str, refused: Optional[List[str]] = None
) -> Optional[Tuple[str, Dict[str, Any]]]:
    """The last report an ended process of the run wrote from ``template``: the newest file there
    whose ``process.pid`` and ``run_id`` are its. The directory is shared with whoever else may
    write there: a name that is a link, a FIFO or a device is not read (``_files.read_regular``;
    a FIFO never blocks) and is said in ``refused`` (``PATH: why``), when given."""
    directory = os.path.dirname(template)
    prefix = os.path.basename(template).split("%", 1)[0]
    best = None
    for path in glob.glob(os.path.join(glob.escape(directory), glob.escape(prefix) + "*.json")):
        if str(pid) not in os.path.basename(path):
            continue
        try:
            data, st = _files.read_regular(path)
        except OSError as e:
            if refused is not None and e.errno in (errno.ELOOP, errno.EINVAL):
                refused.append(f"{path}: {e.strerror}")
            continue
        try:
            report = json.loads(data)
            if report.get("process", {}).get("pid") != pid or report.get("run_id") != run:
                continue
        except (ValueError, AttributeError):
            continue
        mtime = st.st_mtime
        if best is None or mtime > best[0]:
            best = (mtime, path, report)
    return None if best is None else (best[1], best[2])


def _node_snapshot(run: str, ended: List[Tuple[int, str]], wait: float) -> Dict[str, Any]:
    """On one node: every live process of the run, asked for its report with
    ``cuguard snapshot``; and for each ``(pid, report template)`` of ``ended`` not alive here,
    its last report."""
    me = os.getpid()
    marker = run.encode()
    live, idle, failed, reports = [], [], [], []
    exe = str(_launcher.binary())
    # This worker too (it may have run the job's tasks before): `cuguard snapshot` signals it,
    # and the shim's own thread writes its report while this one waits.
    env = {k: v for k, v in _launcher.command_env().items() if k != "LD_PRELOAD"}
    for entry in sorted(os.listdir("/proc"), key=lambda e: (len(e), e)):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if _environ(pid).get(RUN_VARIABLE.encode()) != marker:
            continue
        deadline = time.monotonic() + wait
        while True:
            done = subprocess.run(
                [exe, "snapshot", "--wait", f"{max(0.5, deadline - time.monotonic()):g}", str(pid)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                check=False,
            )
            why = done.stderr.strip()
            # A process that has just made its first allocation starts answering the signal
            # a moment later: ask again until the wait is over.
            if done.returncode == 0 or "snapshot signal" not in why or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if done.returncode == 0:
            try:
                data, _ = _files.read_regular(done.stdout.strip())
                reports.append(("live", pid, json.loads(data)))
                live.append(pid)
                continue
            except OSError as e:
                why = f"its report {done.stdout.strip()} could not be read: {e.strerror or e}"
            except ValueError as e:
                why = f"its report {done.stdout.strip()} could not be read: {e}"
        if "has not started tracking yet" in why:
            idle.append(pid)
        elif _alive(pid):
            failed.append({"pid": pid, "why": why})
    found = []
    for pid, template in ended:
        if pid in live or pid in idle or (_alive(pid) and _environ(pid).get(RUN_VARIABLE.encode()) == marker):
            continue
        refused: List[str] = []
        last = _last_report(template, pid, run, refused) if template else None
        if last is not None:
            reports.append((last[0], pid, last[1]))
            found.append(pid)
        elif refused:
            failed.append({"pid": pid, "why": "its report was not read: " + "; ".join(refused)})
    return {"reports": reports, "idle": idle, "failed": failed, "found": found}


def _registry(run: str) -> List[Dict[str, str]]:
    from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_list

    entries = []
    for key in _internal_kv_list(f"{run}/", namespace=_KV_NAMESPACE):
        value = _internal_kv_get(key, namespace=_KV_NAMESPACE)
        if value:
            try:
                entries.append(json.loads(value))
            except ValueError:
                pass
    return entries


def snapshot(timeout: float = 60) -> Dict[str, Any]:
    """A live snapshot of every worker of this Ray job, on every node, and of the driver when it
    runs under the shim, in one merged report as ``cuguard merge`` writes it
    (``docs/report.schema.json``, ``merged``): ``{"schema", "schema_version", "tool", "merged":
    {"created_unix_ms", "inputs", "absent"}, "processes": [REPORT, ...]}``.

    ``processes``: the live workers that allocated, by node and pid (each a ``reason: "request"``,
    ``complete: false`` report, labelled as the module's documentation says), then the workers
    that ran a task and have ended, each by its last report (final, or its last checkpoint), then
    the driver. ``inputs`` names where each came from: ``ray-worker:NODE_IP:PID`` for a live
    worker, the report's path for an ended one, ``driver``. ``absent``: the workers that ran a
    task but gave nothing: ``{"worker", "node", "pid", "why"}`` (ended without a report, killed
    before its first checkpoint; ended, its report's name a link, a FIFO or a device, which is
    not read; or alive but not answering, with ``cuguard snapshot``'s message). Workers that
    never allocated are left out. Raises :class:`cuguard.CuguardError` when this job's workers
    are not under the shim, or naming the nodes whose snapshot task failed or did not end within
    ``timeout`` seconds."""
    from . import active
    from . import snapshot as process_snapshot

    run = _job_run()
    registered = _registry(run)
    nodes = _alive_nodes()
    by_node: Dict[str, List[Tuple[int, str]]] = {}
    for entry in registered:
        by_node.setdefault(entry.get("ray_node", ""), []).append(
            (int(entry.get("pid", 0)), entry.get("report", ""))
        )
    wait = max(1.0, min(30.0, timeout / 2))
    tasks = {
        _node_name(n): _on_node(_node_snapshot, n).remote(run, by_node.get(n["NodeID"], []), wait)
        for n in nodes
    }
    results, failed = _gather(tasks, timeout)
    if failed:
        raise CuguardError("cuguard.ray.snapshot: no answer from:\n  " + "\n  ".join(sorted(failed)))
    inputs: List[str] = []
    processes: List[Dict[str, Any]] = []
    absent: List[Dict[str, Any]] = []
    seen = set()
    ended = []
    for node in nodes:
        result = results[_node_name(node)]
        ip = node.get("NodeManagerAddress", "?")
        for where, pid, report in result["reports"]:
            seen.add((node["NodeID"], pid))
            if where == "live":
                inputs.append(f"ray-worker:{ip}:{pid}")
                processes.append(report)
            else:
                ended.append((where, report))
        for f in result["failed"]:
            seen.add((node["NodeID"], f["pid"]))
            absent.append({"worker": None, "node": ip, "pid": f["pid"], "why": f["why"]})
        for pid in result["idle"]:
            seen.add((node["NodeID"], pid))
    for where, report in ended:
        inputs.append(where)
        processes.append(report)
    alive_ids = {n["NodeID"] for n in nodes}
    for entry in sorted(registered, key=lambda e: (e.get("ray_node_ip", ""), int(e.get("pid", 0)))):
        pid = int(entry.get("pid", 0))
        node_id = entry.get("ray_node", "")
        if (node_id, pid) in seen:
            continue
        if node_id in alive_ids:
            why = (
                "it ended without a report (killed before its first checkpoint, or before its "
                "first CUDA allocation)"
            )
        else:
            why = "its node is gone"
        absent.append(
            {"worker": entry.get("worker"), "node": entry.get("ray_node_ip", node_id), "pid": pid, "why": why}
        )
    # A failed live worker: name it by the registry where it is there.
    names = {(e.get("ray_node_ip"), int(e.get("pid", 0))): e.get("worker") for e in registered}
    for a in absent:
        if a["worker"] is None:
            a["worker"] = names.get((a["node"], a["pid"]))
    if active():
        inputs.append("driver")
        processes.append(process_snapshot())
    return {
        "schema": "cuguard-report",
        "schema_version": 1,
        "tool": {"name": "cuguard", "version": _abi.VERSION},
        "merged": {"created_unix_ms": int(time.time() * 1000), "inputs": inputs, "absent": absent},
        "processes": processes,
    }


def _job_processes(run: str) -> List[int]:
    """The processes of this machine, but this one, that belong to the run."""
    marker = run.encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me and _alive(int(entry)):
            if _environ(int(entry)).get(RUN_VARIABLE.encode()) == marker:
                found.append(int(entry))
    return sorted(found)


def shutdown(timeout: float = 30) -> List[int]:
    """Has every live worker of the job write its report as it is now (:func:`snapshot`, into
    each worker's report file), then ``ray.shutdown()``, then waits up to ``timeout`` seconds for
    this machine's workers of the job to end: ``ray.shutdown()`` returns before they have. A
    worker that ends through ``_exit`` replaces that report with its final one; one that Ray ends
    with SIGKILL keeps it. Returns the pids still running then (empty when all ended)."""
    run = _job_run() if ray.is_initialized() else None
    if run is not None:
        # Every worker's report as it is now, in its file, on every node: Ray may end a worker
        # with SIGKILL, which leaves no final report.
        try:
            snapshot(timeout=timeout)
        except CuguardError:
            pass
    ray.shutdown()
    if run is None:
        return []
    deadline = time.monotonic() + timeout
    while True:
        left = _job_processes(run)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)
