"""`cuguard.dask` on a real `distributed.LocalCluster` of two worker processes, simulated driver.

One cluster for the module (Dask starts slowly). The tests run in file order on it:
`register` puts both workers under the shim, tasks leak a known amount on each worker, a live
`cuguard.dask.snapshot` sees it, one worker is killed with SIGKILL (its nanny starts a new one,
which joins under the shim too), and after the cluster closes, `cuguard merge` and
`cuguard summary --format json` on the workers' reports give each worker's leaks exactly, the killed
one's from its last checkpoint, marked incomplete.
"""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from conftest import clean_env, cuguard_command, load_report, run, run_sim

distributed = pytest.importorskip("distributed")

import cuguard  # noqa: E402
import cuguard.dask  # noqa: E402
import dask_tasks  # noqa: E402

MiB = 1 << 20


class Cluster:
    """The module's cluster, its client and where its workers' reports go."""

    def __init__(self, reports: Path):
        self.reports = reports
        self.cluster = distributed.LocalCluster(
            n_workers=2,
            processes=True,
            threads_per_worker=1,
            dashboard_address=None,
            scheduler_port=0,
            silence_logs=40,
        )
        self.client = distributed.Client(self.cluster)
        self.closed = False
        #: pid -> (worker address, leaks, leaked bytes) of every worker that leaked.
        self.expected = {}
        self.killed_pid = None

    def close(self):
        if not self.closed:
            self.closed = True
            self.client.close()
            self.cluster.close()

    def report_files(self):
        return sorted(self.reports.glob("cuguard.dask-worker.*.json"))


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    reports = tmp_path_factory.mktemp("dask-reports")
    saved = dict(os.environ)
    # The nannies run in this process and set the workers' variables in its environment before
    # they spawn a worker (distributed's pre_spawn_env): put it back afterwards.
    os.environ.update({"CUGUARD_CHECKPOINT_SECS": "1", "CUGUARD_QUIET": "1"})
    c = Cluster(reports)
    try:
        yield c
    finally:
        c.close()
        os.environ.clear()
        os.environ.update(saved)


def test_register_refuses_a_report_path_without_the_pid():
    with pytest.raises(ValueError, match="%p"):
        cuguard.dask.register(None, driver="sim", report="cuguard.worker.json")
    with pytest.raises(ValueError, match="driver"):
        cuguard.dask.register(None, driver="gpu")


def test_register_restarts_every_worker_under_the_shim_and_labels_it(dask_cluster):
    client = dask_cluster.client
    before = client.run(os.getpid)
    assert not any(client.run(cuguard.active).values())
    report = str(dask_cluster.reports / cuguard.dask.DEFAULT_REPORT)
    pids = cuguard.dask.register(client, limit="1GiB", driver="sim", report=report)
    assert len(pids) == 2
    assert set(pids.values()).isdisjoint(before.values()), "the workers were restarted"
    assert all(client.run(cuguard.active).values())
    environ = client.run(
        lambda: {k: os.environ.get(k) for k in ("CUGUARD_LIMIT", "CUGUARD_REPORT")}
    )
    assert list(environ.values()) == [{"CUGUARD_LIMIT": "1GiB", "CUGUARD_REPORT": report}] * 2
    labels = client.run(lambda: cuguard.snapshot()["process"]["labels"])
    names = {w["name"] for w in client.scheduler_info()["workers"].values()}
    assert {address: l["worker_address"] for address, l in labels.items()} == {a: a for a in labels}
    assert {l["worker"] for l in labels.values()} == {str(n) for n in names}
    # Registering again with the same settings restarts nothing.
    assert cuguard.dask.register(client, limit="1GiB", driver="sim", report=report) == pids


def test_snapshot_merges_every_workers_live_report(dask_cluster):
    client = dask_cluster.client
    addresses = sorted(client.scheduler_info()["workers"])
    for i, address in enumerate(addresses):
        count, size = i + 1, (i + 1) * MiB
        pid = client.submit(dask_tasks.leak, count, size, workers=[address], pure=False).result()
        dask_cluster.expected[pid] = (address, count, count * size)
    merged = cuguard.dask.snapshot(client)
    assert merged["schema"] == "cuguard-report" and merged["schema_version"] == 1
    assert merged["tool"] == {"name": "cuguard", "version": cuguard.__version__}
    assert merged["merged"]["inputs"] == [f"dask-worker:{a}" for a in addresses]
    assert len(merged["processes"]) == 2  # this process is not under the shim
    for report in merged["processes"]:
        address, count, size = dask_cluster.expected[report["process"]["pid"]]
        assert report["process"]["labels"]["worker_address"] == address
        assert report["reason"] == "request" and report["complete"] is False
        assert len(report["leaks"]) == count
        assert sum(leak["size"] for leak in report["leaks"]) == size


def test_a_killed_worker_leaves_its_checkpoint_and_its_replacement_joins(dask_cluster, tmp_path):
    client = dask_cluster.client
    victim = sorted(client.scheduler_info()["workers"])[0]
    pid = client.submit(dask_tasks.leak, 3, MiB, workers=[victim], pure=False).result()
    address, count, size = dask_cluster.expected[pid]
    dask_cluster.expected[pid] = (address, count + 3, size + 3 * MiB)
    # Wait for a checkpoint that holds the new leaks (CUGUARD_CHECKPOINT_SECS=1).
    files = [f for f in dask_cluster.report_files() if f.name.endswith(f".{pid}.json")]
    deadline = time.monotonic() + 15
    while True:
        if files:
            try:
                if len(load_report(files[0])["leaks"]) == count + 3:
                    break
            except (OSError, ValueError):
                pass
        assert time.monotonic() < deadline, f"no checkpoint with the leaks from worker {pid}"
        time.sleep(0.2)
        files = [f for f in dask_cluster.report_files() if f.name.endswith(f".{pid}.json")]
    doomed = client.submit(dask_tasks.die, workers=[victim], pure=False)  # kept until it ran
    dask_cluster.killed_pid = pid
    # The nanny starts a new worker process: it comes back under the shim, labelled.
    deadline = time.monotonic() + 30
    while True:
        try:
            pids = client.run(os.getpid)
        except OSError:  # asked while it died (distributed's CommClosedError)
            pids = {}
        if len(pids) == 2 and pid not in pids.values():
            break
        assert time.monotonic() < deadline, "the killed worker was not replaced"
        time.sleep(0.2)
    del doomed
    assert all(client.run(cuguard.active).values())
    assert all(
        "worker" in labels
        for labels in client.run(lambda: cuguard.snapshot()["process"]["labels"]).values()
    )


def test_merged_summary_gives_each_workers_leaks_and_marks_the_killed_one(dask_cluster, tmp_path):
    assert dask_cluster.killed_pid is not None, "runs after the kill test"
    dask_cluster.close()
    files = dask_cluster.report_files()
    by_pid = {load_report(f)["process"]["pid"]: f for f in files}
    assert set(dask_cluster.expected) <= set(by_pid)
    merged = tmp_path / "merged.json"
    env = clean_env()
    done = run(
        cuguard_command() + ["merge", "-o", str(merged)] + [str(f) for f in files], tmp_path, env
    )
    assert done.returncode == 0, done.stderr
    done = run(cuguard_command() + ["summary", "--format", "json", str(merged)], tmp_path, env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    processes = {p["process"]["pid"]: p for p in summary["processes"]}
    for pid, (address, count, size) in dask_cluster.expected.items():
        p = processes[pid]
        assert (p["leaks"], p["leaked_bytes"]) == (count, size), (address, p)
        if pid == dask_cluster.killed_pid:
            assert (p["complete"], p["reason"]) == (False, "checkpoint")
        else:
            assert (p["complete"], p["reason"]) == (True, "exit")
    # The replacement never used CUDA, so it wrote no report (nor did the workers from before
    # register, which were not under the shim): one report per worker that leaked.
    assert set(processes) == set(dask_cluster.expected)
    assert (summary["reports"], summary["complete_reports"]) == (2, 1)
    assert summary["leaks"] == sum(count for _, count, _ in dask_cluster.expected.values())


def test_a_client_under_the_shim_is_part_of_the_snapshot(tmp_path):
    """The client runs under `cuguard run` (so its worker starts under the shim already, and
    `register` restarts it once, for its own settings); the snapshot holds the worker, then the
    client."""
    script = Path(__file__).resolve().parent / "dask_client.py"
    done = run_sim(
        [sys.executable, str(script), str(tmp_path / "cuguard.dask-worker.%p.json")],
        tmp_path,
        report=tmp_path / "client.json",
        PYTHONPATH=str(script.parent),
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["workers_active_before"] == [True]
    ((address, worker_pid),) = out["pids"].items()
    assert out["inputs"] == [f"dask-worker:{address}", "client"]
    worker, client = out["processes"]
    assert (worker["pid"], worker["labels"]["worker_address"]) == (worker_pid, address)
    assert (worker["leaks"], worker["leaked_bytes"]) == (2, 2 * MiB)
    assert (client["pid"], client["leaks"], client["leaked_bytes"]) == (
        out["client_pid"],
        1,
        3 * MiB,
    )
    assert "worker" not in client["labels"]
