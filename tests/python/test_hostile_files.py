"""Files the package reads because another process or a directory named them (``docs/reliability.md``,
"Hostile input"): a FIFO, a device or a link there is never opened blocking nor followed, and a
file is read up to the size it had when opened (``cuguard._files.read_regular``). What reads them:
``cuguard.ray.snapshot()``, from a dead worker's last report in its report directory
(``cuguard.ray._last_report``). And ``cuguard jupyter install-kernel --prefix``, which goes through
no link below the prefix and no directory others may change (another user's: as root, in
``tests/it/hostile_input.rs``). None of these needs the shim or a Ray cluster."""

import errno
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from cuguard import _files, _jupyter

#: Far more than a read of a small file needs; less than forever (a blocked ``open`` of a FIFO).
LIMIT = 10.0


def within(call, *fifos: Path):
    """``call()``'s result, or a failed test if it has not returned within :data:`LIMIT` seconds:
    then a writer is opened on each of ``fifos``, so that a reader blocked on one returns."""
    result = {}

    def run():
        try:
            result["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            result["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(LIMIT)
    if thread.is_alive():
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        thread.join(LIMIT)
        pytest.fail(f"{call} did not return within {LIMIT} s: it blocks on a FIFO")
    if "error" in result:
        raise result["error"]
    return result["value"]


def report(pid: int, run: str) -> dict:
    return {"schema": "cuguard-report", "process": {"pid": pid}, "run_id": run}


def test_read_regular_refuses_a_fifo_a_device_and_a_link_and_reads_a_file_to_its_size_at_open(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as e:
        within(lambda: _files.read_regular(fifo), fifo)
    assert (e.value.errno, e.value.strerror, e.value.filename) == (
        errno.EINVAL,
        "is not a regular file (a FIFO); not read",
        str(fifo),
    )
    with pytest.raises(OSError) as e:
        within(lambda: _files.read_regular("/dev/zero"))
    assert e.value.strerror == "is not a regular file (a character device); not read"

    real = tmp_path / "real"
    real.write_bytes(b"0123456789")
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(OSError) as e:
        _files.read_regular(link)
    assert (e.value.errno, e.value.strerror, e.value.filename) == (
        errno.ELOOP,
        "is a symbolic link; not read",
        str(link),
    )
    data, st = _files.read_regular(real)
    assert (data, st.st_size) == (b"0123456789", 10)


def test_a_fifo_a_device_or_a_link_among_a_dead_workers_reports_is_skipped_and_said(tmp_path: Path):
    # CI installs the `ray` extra; a skip there fails the suite (tests/it/python.rs).
    pytest.importorskip("ray")
    from cuguard import ray as cuguard_ray

    run, pid = "run-1", 4242
    template = str(tmp_path / cuguard_ray.DEFAULT_REPORT)
    # The names the worker's reports would have: a FIFO, a link to a report elsewhere, and
    # nothing else: no report is read, none blocks, and each is said.
    fifo = tmp_path / f"cuguard.ray-worker.a.{pid}.json"
    os.mkfifo(fifo)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(report(pid, run)))
    link = tmp_path / f"cuguard.ray-worker.b.{pid}.json"
    link.symlink_to(elsewhere)
    assert within(lambda: cuguard_ray._last_report(template, pid, run), fifo) is None
    refused = []
    assert within(lambda: cuguard_ray._last_report(template, pid, run, refused), fifo) is None
    assert sorted(refused) == [
        f"{fifo}: is not a regular file (a FIFO); not read",
        f"{link}: is a symbolic link; not read",
    ]
    # A real report beside them is read.
    real = tmp_path / f"cuguard.ray-worker.c.{pid}.json"
    real.write_text(json.dumps(report(pid, run)))
    refused = []
    found = within(lambda: cuguard_ray._last_report(template, pid, run, refused), fifo)
    assert found == (str(real), report(pid, run))
    assert len(refused) == 2


def install(prefix: Path, name: str):
    return _jupyter.main(["install-kernel", "--prefix", str(prefix), "--name", name, "--python", "/usr/bin/python3"])


def test_install_kernel_goes_through_no_link_and_no_open_directory_below_its_prefix(tmp_path: Path, capsys):
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # A link above the kernel's directory: refused, nothing made where it points.
    (prefix / "share").symlink_to(elsewhere)
    assert install(prefix, "mine") == 2
    assert capsys.readouterr().err == (
        f"cuguard jupyter install-kernel: {prefix / 'share'}: is a symbolic link; cuguard never "
        "writes through a link\n"
    )
    assert list(elsewhere.iterdir()) == []
    (prefix / "share").unlink()

    # A directory above it that every user may write to (not sticky): refused, nothing made in it.
    jupyter = prefix / "share" / "jupyter"
    jupyter.mkdir(parents=True)
    os.chmod(jupyter, 0o777)
    assert install(prefix, "mine") == 2
    assert capsys.readouterr().err == (
        f"cuguard jupyter install-kernel: {jupyter}: can be written by every user (mode 777), who "
        "could replace the kernel's spec; give another --prefix or --name\n"
    )
    assert list(jupyter.iterdir()) == []

    # Writable by a group that is not the user's own: refused.
    others = [g for g in os.getgroups() if not _jupyter._private_group(g)]
    group = 54321 if os.geteuid() == 0 else (others[0] if others else None)
    if group is not None:
        os.chown(jupyter, -1, group)
        os.chmod(jupyter, 0o775)
        assert install(prefix, "mine") == 2
        assert capsys.readouterr().err == (
            f"cuguard jupyter install-kernel: {jupyter}: can be written by the users of group "
            f"{group} (mode 775), who could replace the kernel's spec; give another --prefix or "
            "--name\n"
        )
        assert list(jupyter.iterdir()) == []
        os.chown(jupyter, -1, os.getegid())

    # Writable by the user's own private group, or closed: installed.
    os.chmod(jupyter, 0o775 if _jupyter._private_group(os.getegid()) else 0o755)
    assert install(prefix, "mine") == 0
    assert stat.S_IMODE(os.lstat(jupyter / "kernels" / "mine" / "kernel.json").st_mode) == 0o600
