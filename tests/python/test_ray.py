"""`cuguard.ray` on a real local Ray cluster (Ray from PyPI), simulated driver.

One cluster for the module (Ray starts slowly): `ray.init(num_gpus=2)` declares two GPUs on a
machine without any, and the simulated driver gives the workers CUDA. The tests run in file
order on it: two actors (`leaker`, `steady`, half a GPU each) and a task allocate; each worker's
report is labelled with the job, node, actor or task name and worker id; a live
`cuguard.ray.snapshot` shows the leaking actor's leaks while its method still runs; `ray.kill`
ends it and its final report stays, labelled; an actor killed with SIGKILL leaves its last
checkpoint, one killed before its first checkpoint is named absent, one Ray restarts comes back
labelled with its name; and after `ray.shutdown()`, `cuguard summary --by worker` on the reports names each
worker. A node whose workers cannot import cuguard is named in `init`'s error.
"""

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env, cuguard_command, load_report, run

# CI installs the `ray` extra; a skip there fails the suite (tests/it/python.rs).
ray = pytest.importorskip("ray")

import cuguard  # noqa: E402
import cuguard.ray  # noqa: E402

HERE = Path(__file__).resolve().parent
MiB = 1 << 20

#: Ray's own start-up and the first workers on a loaded machine.
TIMEOUT = 120


class Cluster:
    """The module's Ray cluster, what its workers did, and where their reports go."""

    def __init__(self, reports: Path):
        self.reports = reports
        self.template = str(reports / cuguard.ray.DEFAULT_REPORT)
        cuguard.ray.init(
            driver="sim",
            limit="1GiB",
            report=self.template,
            checkpoint=1,
            timeout=TIMEOUT,
            num_cpus=4,
            num_gpus=2,
            include_dashboard=False,
            runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}},
        )
        import ray_work

        self.work = ray_work
        self.closed = False
        #: worker label -> pid.
        self.pids = {}
        #: worker label -> Ray's worker id.
        self.worker_ids = {}

    def close(self):
        if not self.closed:
            self.closed = True
            self.left = cuguard.ray.shutdown()

    def report_of(self, pid: int) -> Path:
        (path,) = [p for p in self.reports.glob(f"cuguard.ray-worker.*.{pid}.json")]
        return path


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reports = tmp_path_factory.mktemp("ray-reports")
    saved = dict(os.environ)
    os.environ["CUGUARD_QUIET"] = "1"
    sys.path.insert(0, str(HERE))
    c = Cluster(reports)
    try:
        yield c
    finally:
        c.close()
        os.environ.clear()
        os.environ.update(saved)


def processes_by_worker(merged):
    return {p["process"]["labels"].get("worker"): p for p in merged["processes"]}


def test_runtime_env_refuses_a_report_path_without_the_pid_and_a_hook_of_its_own():
    with pytest.raises(ValueError, match="%p"):
        cuguard.ray.runtime_env(driver="sim", report="cuguard.worker.json")
    with pytest.raises(ValueError, match="driver"):
        cuguard.ray.runtime_env(driver="gpu")
    with pytest.raises(ValueError, match="worker_process_setup_hook"):
        cuguard.ray.runtime_env(driver="sim", base={"worker_process_setup_hook": "mine.setup"})
    env = cuguard.ray.runtime_env(driver="sim", base={"env_vars": {"PYTHONPATH": "/mine", "A": "b"}})
    assert env["worker_process_setup_hook"] == "cuguard.ray._setup"
    variables = env["env_vars"]
    assert variables["A"] == "b"
    assert variables["PYTHONPATH"].split(os.pathsep)[:2] == [variables["CUGUARD_PYTHON_BOOTSTRAP"], "/mine"]
    assert variables["CUGUARD_RAY_RUN"] == variables["CUGUARD_RUN_ID"]
    assert variables["CUGUARD_CHECKPOINT_SECS"] == "10"
    assert "libcuguard" in variables["LD_PRELOAD"]


def test_every_worker_is_labelled_and_sees_its_limit(cluster):
    work = cluster.work
    leaker = work.Leaker.options(name="leaker").remote()
    steady = work.Steady.options(name="steady").remote()
    cluster.actors = {"leaker": leaker, "steady": steady}
    for name, actor in cluster.actors.items():
        cluster.pids[name], cluster.worker_ids[name] = ray.get(actor.who.remote(), timeout=TIMEOUT)
    ray.get(leaker.leak.remote(2, MiB), timeout=TIMEOUT)
    ray.get(steady.work.remote(MiB), timeout=TIMEOUT)
    pid, worker_id = ray.get(work.allocate.remote(MiB), timeout=TIMEOUT)
    task = f"allocate:{worker_id[:8]}"
    cluster.pids[task], cluster.worker_ids[task] = pid, worker_id
    cluster.task = task
    # The framework inside the worker is told the limit: cuMemGetInfo's total is 1 GiB.
    assert ray.get(steady.environ.remote("CUGUARD_LIMIT")) == "1GiB"
    free, total = ray.get(steady.device_memory.remote())
    assert total == 1 << 30 and free <= total

    merged = cuguard.ray.snapshot(timeout=TIMEOUT)
    job = ray.get_runtime_context().get_job_id()
    node = ray.get_runtime_context().get_node_id()
    workers = processes_by_worker(merged)
    assert set(workers) == {"leaker", "steady", task}, merged["merged"]
    for name, report in workers.items():
        labels = report["process"]["labels"]
        assert report["process"]["pid"] == cluster.pids[name]
        assert labels["ray_job"] == job
        assert labels["ray_node"] == node
        assert labels["ray_worker_id"] == cluster.worker_ids[name]
        assert report["reason"] == "request" and report["complete"] is False
    assert workers["leaker"]["process"]["labels"]["ray_actor"] == "leaker"
    assert workers["steady"]["process"]["labels"]["ray_actor"] == "steady"
    assert workers[task]["process"]["labels"]["ray_task"] == "allocate"
    assert "ray_actor" not in workers[task]["process"]["labels"]
    assert [len(workers[n]["leaks"]) for n in ("leaker", "steady", task)] == [2, 0, 0]
    assert merged["merged"]["absent"] == []
    assert sorted(merged["merged"]["inputs"]) == sorted(
        f"ray-worker:{ray.util.get_node_ip_address()}:{p}" for p in cluster.pids.values()
    )


def test_snapshot_shows_the_leaking_actor_while_it_runs(cluster, tmp_path):
    leaker = cluster.actors["leaker"]
    release = tmp_path / "release"
    running = leaker.leak_and_hold.remote(3, 2 * MiB, str(release))
    deadline = time.monotonic() + 60
    while True:
        merged = cuguard.ray.snapshot(timeout=TIMEOUT)
        report = processes_by_worker(merged)["leaker"]
        if len(report["leaks"]) == 5:
            break
        assert time.monotonic() < deadline, "the snapshot never showed the held leaks"
        time.sleep(0.2)
    ready, _ = ray.wait([running], timeout=0)
    assert not ready, "the method still runs"
    path = tmp_path / "live.json"
    path.write_text(json.dumps(merged))
    done = run(cuguard_command() + ["summary", "--by", "worker", str(path)], tmp_path, clean_env())
    assert done.returncode == 0, done.stderr
    line = re.search(r"^  worker leaker: 1 process, leaked (.*)$", done.stdout, re.M)
    assert line, done.stdout
    assert line.group(1).startswith("8.0 MiB in 5 leaks"), line.group(0)
    release.write_text("")
    assert ray.get(running, timeout=TIMEOUT) == cluster.pids["leaker"]


def test_a_killed_actor_leaves_its_labelled_report(cluster):
    ray.kill(cluster.actors["leaker"])
    pid = cluster.pids["leaker"]
    deadline = time.monotonic() + 30
    while True:
        try:
            report = load_report(cluster.report_of(pid))
            if report["complete"]:
                break
        except (ValueError, OSError):
            pass
        assert time.monotonic() < deadline, "no final report from the killed actor"
        time.sleep(0.2)
    assert (report["reason"], len(report["leaks"])) == ("exit", 5)
    labels = report["process"]["labels"]
    assert (labels["worker"], labels["ray_worker_id"]) == ("leaker", cluster.worker_ids["leaker"])
    # The snapshot reads it from its report now.
    merged = cuguard.ray.snapshot(timeout=TIMEOUT)
    ended = processes_by_worker(merged)["leaker"]
    assert (ended["reason"], ended["complete"]) == ("exit", True)
    assert str(cluster.report_of(pid)) in merged["merged"]["inputs"]


def test_an_actor_killed_with_sigkill_leaves_its_last_checkpoint(cluster):
    doomed = cluster.work.Leaker.options(name="doomed").remote()
    pid, worker_id = ray.get(doomed.who.remote(), timeout=TIMEOUT)
    cluster.pids["doomed"], cluster.worker_ids["doomed"] = pid, worker_id
    ray.get(doomed.leak.remote(1, MiB), timeout=TIMEOUT)
    # Wait for a checkpoint (every second) with the leak, then SIGKILL.
    deadline = time.monotonic() + 30
    while True:
        try:
            if len(load_report(cluster.report_of(pid))["leaks"]) == 1:
                break
        except (ValueError, OSError):
            pass
        assert time.monotonic() < deadline, "no checkpoint from the doomed actor"
        time.sleep(0.2)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(doomed.leak_and_die.remote(0, MiB), timeout=TIMEOUT)
    merged = cuguard.ray.snapshot(timeout=TIMEOUT)
    report = processes_by_worker(merged)["doomed"]
    assert (report["reason"], report["complete"]) == ("checkpoint", False)
    assert report["process"]["labels"]["ray_worker_id"] == worker_id
    assert len(report["leaks"]) == 1


def test_a_restarted_actor_comes_back_under_the_shim_with_the_same_name(cluster):
    phoenix = cluster.work.Leaker.options(name="phoenix", max_restarts=1).remote()
    first, _ = ray.get(phoenix.who.remote(), timeout=TIMEOUT)
    ray.get(phoenix.leak.remote(1, MiB), timeout=TIMEOUT)
    deadline = time.monotonic() + 30
    while True:  # its first checkpoint, with the leak
        try:
            if len(load_report(cluster.report_of(first))["leaks"]) == 1:
                break
        except (ValueError, OSError):
            pass
        assert time.monotonic() < deadline, "no checkpoint from phoenix"
        time.sleep(0.2)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(phoenix.leak_and_die.remote(0, MiB), timeout=TIMEOUT)
    deadline = time.monotonic() + 60
    while True:  # Ray restarts it in a new process
        try:
            second, worker_id = ray.get(phoenix.who.remote(), timeout=TIMEOUT)
            break
        except ray.exceptions.RayActorError:
            assert time.monotonic() < deadline, "phoenix was not restarted"
            time.sleep(0.2)
    assert second != first
    ray.get(phoenix.leak.remote(2, MiB), timeout=TIMEOUT)
    merged = cuguard.ray.snapshot(timeout=TIMEOUT)
    lives = [p for p in merged["processes"] if p["process"]["labels"].get("worker") == "phoenix"]
    assert [(p["process"]["pid"], p["reason"], len(p["leaks"])) for p in lives] == [
        (second, "request", 2),
        (first, "checkpoint", 1),
    ]
    assert lives[0]["process"]["labels"]["ray_worker_id"] == worker_id
    ray.kill(phoenix)
    cluster.pids["phoenix"] = second
    cluster.phoenix_first = first


def test_a_worker_killed_before_its_first_checkpoint_is_absent_from_the_snapshot(cluster):
    vanished = cluster.work.Leaker.options(name="vanished").remote()
    pid, worker_id = ray.get(vanished.who.remote(), timeout=TIMEOUT)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(vanished.leak_and_die.remote(1, MiB), timeout=TIMEOUT)
    merged = cuguard.ray.snapshot(timeout=TIMEOUT)
    assert "vanished" not in processes_by_worker(merged)
    assert merged["merged"]["absent"] == [
        {
            "worker": "vanished",
            "node": ray.util.get_node_ip_address(),
            "pid": pid,
            "why": "it ended without a report (killed before its first checkpoint, or before its "
            "first CUDA allocation)",
        }
    ]


def test_summary_by_worker_names_each_worker_at_the_end(cluster, tmp_path):
    assert "doomed" in cluster.pids, "runs after the kill tests"
    cluster.close()
    # cuguard.ray.shutdown() waited for every worker to end (each writes its report as it ends).
    assert cluster.left == []
    assert not any(cuguard.ray._alive(pid) for pid in cluster.pids.values())
    done = run(
        cuguard_command() + ["summary", "--by", "worker", str(cluster.reports)], tmp_path, clean_env()
    )
    assert done.returncode == 0, done.stderr
    groups = dict(re.findall(r"^  worker (\S+): \d+ process(?:es)?, leaked (.*?), peak", done.stdout, re.M))
    assert set(groups) == {"leaker", "steady", "doomed", "phoenix", cluster.task}, done.stdout
    phoenix = re.search(r"^  worker phoenix: 2 processes, leaked 3.0 MiB in 3 leaks", done.stdout, re.M)
    assert phoenix, done.stdout
    assert groups["leaker"].startswith("8.0 MiB in 5 leaks"), done.stdout
    assert groups["doomed"].startswith("1.0 MiB in 1 leak"), done.stdout
    assert groups["steady"].startswith("nothing") or groups["steady"].startswith("0 B"), done.stdout
    # Every worker's last report: its final one (exit), or, where Ray ended it with SIGKILL at
    # the shutdown, the one cuguard.ray.shutdown() had it write first; the SIGKILLed actors'
    # are their checkpoints.
    first = load_report(cluster.report_of(cluster.phoenix_first))
    assert (first["reason"], first["process"]["labels"]["worker"]) == ("checkpoint", "phoenix")
    leaks = {"leaker": 5, "steady": 0, "doomed": 1, "phoenix": 2, cluster.task: 0}
    for name, pid in cluster.pids.items():
        report = load_report(cluster.report_of(pid))
        assert report["process"]["labels"]["worker"] == name
        assert len(report["leaks"]) == leaks[name], name
        if name == "doomed":
            assert (report["reason"], report["complete"]) == ("checkpoint", False)
        elif name != "leaker":  # leaker's was written at ray.kill
            # A worker Ray SIGKILLed at the shutdown: the report cuguard.ray.shutdown() asked for,
            # or a periodic checkpoint written after it (the same moment's state); one Ray ended
            # with SIGTERM: its final report, written at the signal.
            assert (report["reason"], report["complete"]) in [
                ("exit", True),
                ("signal", True),
                ("request", False),
                ("checkpoint", False),
            ], name
        else:
            assert (report["reason"], report["complete"]) == ("exit", True)


def test_a_node_whose_workers_cannot_import_cuguard_is_named(tmp_path, cluster):
    """Where cuguard is not installed, the workers' setup hook cannot be imported: `init` says
    which node, within its timeout, and shuts Ray down. (A hook module missing everywhere stands
    in for a node without cuguard.)"""
    assert cluster.closed, "runs after the module's cluster is shut down"
    script = (
        "import cuguard, cuguard.ray\n"
        "try:\n"
        "    cuguard.ray.init(driver='sim', report=%r, timeout=60, num_cpus=1,\n"
        "                     include_dashboard=False)\n"
        "except cuguard.CuguardError as e:\n"
        "    print('=== ' + str(e))\n"
    ) % str(tmp_path / "cuguard.%p.json")
    done = run(
        [sys.executable, "-c", script],
        tmp_path,
        clean_env(CUGUARD_TEST_RAY_HOOK="cuguard_not_installed._setup"),
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("=== ", 1)[-1].strip().splitlines()
    assert lines[0] == "cuguard.ray: workers not under the shim:", done.stdout
    match = re.match(r"^  node (\S+) \(([0-9a-f]{8})\): its worker failed \((\w+)\): (.*)$", lines[1])
    assert match, done.stdout
    ip = match.group(1)
    assert match.group(3) == "WorkerCrashedError", done.stdout
    assert "is cuguard installed there" in match.group(4), done.stdout
    assert ip
