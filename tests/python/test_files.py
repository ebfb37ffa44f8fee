"""How the package writes a whole file (`cuguard._files`, by the rules of the Rust writers'
`cuguard_files::replace`), and the writers that use it (`cuguard jupyter install-kernel`; the
snapshot with `held=True` is run as another user against planted links in
`tests/it/shared_python.rs`). None of these needs the shim."""

import errno
import os
import re
import stat
from pathlib import Path

import pytest

from cuguard import _files, _jupyter

LINK = (
    "is a symbolic link; cuguard never writes through a link (remove it, or give the path it "
    "points to)"
)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def open_umask():
    """A umask that would leave a plainly created file readable and writable by everyone."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_replace_writes_the_whole_file_0600_whatever_the_umask_and_leaves_no_temporary(tmp_path: Path, open_umask):
    out = tmp_path / "out.json"
    _files.replace(out, b"one")
    _files.replace(str(out), b"two")
    assert out.read_bytes() == b"two"
    assert mode(out) == 0o600
    _files.replace(os.fsencode(out), b"three", 0o640)
    assert out.read_bytes() == b"three" and mode(out) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_link_at_the_destination_is_refused_and_not_followed(tmp_path: Path):
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b"precious")
    for target in (theirs, tmp_path / "nothing-there"):
        link = tmp_path / "link.json"
        link.symlink_to(target)
        with pytest.raises(FileExistsError) as refused:
            _files.replace(link, b"x")
        assert refused.value.errno == errno.EEXIST
        assert refused.value.strerror == LINK
        assert refused.value.filename == str(link)
        assert os.readlink(link) == str(target)
        link.unlink()
    assert theirs.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs"]


def test_another_users_file_a_directory_and_a_fifo_are_refused(tmp_path: Path, monkeypatch):
    mine = tmp_path / "mine.json"
    mine.write_bytes(b"old")
    with monkeypatch.context() as m:
        # The file is this user's; as seen by another user, it is another user's.
        m.setattr(os, "geteuid", lambda: os.lstat(mine).st_uid + 1)
        with pytest.raises(PermissionError) as refused:
            _files.replace(mine, b"x")
    uid = os.lstat(mine).st_uid
    assert refused.value.strerror == (
        f"belongs to another user (uid {uid}); cuguard does not replace another user's file"
    )
    assert mine.read_bytes() == b"old"
    with pytest.raises(IsADirectoryError) as refused:
        _files.replace(tmp_path, b"x")
    assert refused.value.strerror == "is a directory; give a file name"
    with pytest.raises(IsADirectoryError) as refused:
        _files.replace(f"{tmp_path}/", b"x")
    assert refused.value.strerror == "names a directory; give a file name"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as refused:
        _files.replace(fifo, b"x")
    assert refused.value.errno == errno.EINVAL
    assert refused.value.strerror == "is not a regular file (a FIFO, socket or device); not written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "mine.json"]


def test_temporary_names_are_random_and_a_name_taken_is_never_opened(tmp_path: Path, monkeypatch):
    out = tmp_path / "out.json"
    names = {_files.temp_name(b"out.json", _files.random_tag()) for _ in range(8)}
    assert len(names) == 8
    for name in names:
        assert re.fullmatch(rb"\.out\.json\.[0-9a-f]{16}\.tmp", name), name
    # Someone's link at the first name drawn: the writer draws another, and never opens the link.
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b"precious")
    (tmp_path / os.fsdecode(_files.temp_name(b"out.json", 1))).symlink_to(theirs)
    tags = iter([1, 2])
    monkeypatch.setattr(_files, "random_tag", lambda: next(tags))
    _files.replace(out, b"written")
    assert out.read_bytes() == b"written"
    assert theirs.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        os.fsdecode(_files.temp_name(b"out.json", 1)),
        "out.json",
        "theirs",
    ]


@pytest.mark.parametrize("length", [1, 200, 238, 240, 250, 255])
def test_long_names_get_temporary_names_that_fit(tmp_path: Path, length: int):
    name = "é" * (length // 2) + "x" * (length % 2)
    raw = name.encode()
    assert len(raw) == length
    temp = _files.temp_name(raw, _files.random_tag())
    assert len(temp) <= _files.NAME_MAX
    temp.decode("utf-8")  # cut at a character boundary
    _files.replace(tmp_path / name, b"ok")
    assert (tmp_path / name).read_bytes() == b"ok"
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_failed_write_removes_its_temporary_and_keeps_the_old_file(tmp_path: Path, monkeypatch):
    out = tmp_path / "out.json"
    out.write_bytes(b"old")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as failed:
        _files.replace(out, b"new")
    assert failed.value.errno == errno.ENOSPC
    assert out.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def install(tmp_path: Path, *args: str):
    return _jupyter.main(["install-kernel", "--prefix", str(tmp_path), "--python", "/usr/bin/python3", *args])


def test_install_kernel_writes_its_spec_0600(tmp_path: Path, open_umask, capsys):
    assert install(tmp_path) == 0
    directory = tmp_path / "share" / "jupyter" / "kernels" / "cuguard"
    spec = directory / "kernel.json"
    assert mode(spec) == 0o600
    assert '"display_name": "Python 3 (cuguard)"' in spec.read_text()
    assert [p.name for p in directory.iterdir()] == ["kernel.json"]
    assert capsys.readouterr().out == f"Installed kernel spec cuguard in {directory}\n"


def test_install_kernel_refuses_a_link_and_a_directory_others_may_change(tmp_path: Path, capsys):
    kernels = tmp_path / "share" / "jupyter" / "kernels"
    kernels.mkdir(parents=True)
    precious = tmp_path / "precious"
    precious.write_bytes(b"precious")
    (kernels / "linked").mkdir()
    (kernels / "linked" / "kernel.json").symlink_to(precious)
    assert install(tmp_path, "--name", "linked") == 2
    assert capsys.readouterr().err == (
        f"cuguard jupyter install-kernel: {kernels / 'linked' / 'kernel.json'}: {LINK}\n"
    )
    assert precious.read_bytes() == b"precious"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (kernels / "moved").symlink_to(elsewhere)
    assert install(tmp_path, "--name", "moved") == 2
    assert capsys.readouterr().err == (
        f"cuguard jupyter install-kernel: {kernels / 'moved'}: is a symbolic link; cuguard never "
        "writes through a link\n"
    )
    assert list(elsewhere.iterdir()) == []

    (kernels / "open").mkdir()
    os.chmod(kernels / "open", 0o777)
    assert install(tmp_path, "--name", "open") == 2
    assert capsys.readouterr().err == (
        f"cuguard jupyter install-kernel: {kernels / 'open'}: can be written by every user (mode "
        "777), who could replace the kernel's spec; give another --prefix or --name\n"
    )
    # Sticky, as /tmp: others may add files but not replace this user's.
    os.chmod(kernels / "open", 0o1777)
    assert install(tmp_path, "--name", "open") == 0
    assert mode(kernels / "open" / "kernel.json") == 0o600
