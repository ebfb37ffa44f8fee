"""Writing a whole file on a shared machine, by the rules of cuguard's Rust writers
(``cuguard_files::replace`` in ``shim/files``), so that another local user's link, file or guessed
name can neither redirect the write nor stop it.

:func:`replace` writes to a temporary file in the target's directory, named ``.NAME.<16 hex
digits>.tmp`` from the kernel's random numbers (NAME shortened so that the whole name fits in
255 bytes), created ``O_CREAT | O_EXCL | O_NOFOLLOW`` with mode 0600 (or the mode asked for,
whatever the umask), synced, then renamed over the target. What is at the target is judged first
and again just before the rename (:func:`check_destination`): a symbolic link, another user's
file, a directory, a FIFO or a device is refused with an :class:`OSError` whose message says
which, the same words as the Rust writers'. The temporary file is removed on any failure.

:func:`read_regular` reads a whole file that another process or a directory named, by the
rules of the Rust reader (``cuguard_format::read::open_regular``): opened ``O_NONBLOCK`` (a FIFO
never blocks), ``O_NOFOLLOW`` (a link is not followed), judged by ``fstat`` on what was opened (a
FIFO or a device is refused, never read) and read up to the size it had when opened.
"""

import errno
import os
import stat
from typing import Optional, Tuple, Union

#: The longest file name most Linux file systems take, in bytes.
NAME_MAX = 255

PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

LINK = (
    "is a symbolic link; cuguard never writes through a link (remove it, or give the path it "
    "points to)"
)
DIRECTORY = "is a directory; give a file name"
NAMES_DIRECTORY = "names a directory; give a file name"
NOT_REGULAR = "is not a regular file (a FIFO, socket or device); not written"
LINK_NOT_READ = "is a symbolic link; not read"


def _kind(mode: int) -> str:
    """What a file that is not a regular one is, in the words of the Rust reader."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _another_user(uid: int) -> str:
    return f"belongs to another user (uid {uid}); cuguard does not replace another user's file"


def _str(path: bytes) -> str:
    return os.fsdecode(path)


def check_destination(path: PathArg) -> None:
    """Whether a file may be put at ``path``: nothing is there, or a regular file of this user.
    Otherwise raises an :class:`OSError` (``filename`` the path) whose message says why: a
    symbolic link (``FileExistsError``), another user's file (``PermissionError``), a directory
    (``IsADirectoryError``), anything else that is not a regular file (``EINVAL``)."""
    raw = os.fsencode(path)
    if raw.endswith(b"/"):
        raise IsADirectoryError(errno.EISDIR, NAMES_DIRECTORY, _str(raw))
    try:
        st = os.lstat(raw)
    except FileNotFoundError:
        return
    _judge(st, _str(raw))


def _judge(st: os.stat_result, shown: str) -> None:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        raise FileExistsError(errno.EEXIST, LINK, shown)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, DIRECTORY, shown)
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, NOT_REGULAR, shown)
    if st.st_uid != os.geteuid():
        raise PermissionError(errno.EACCES, _another_user(st.st_uid), shown)


def shorten(name: bytes, room: int) -> bytes:
    """``name`` cut to at most ``room`` bytes, at a character boundary where it is UTF-8."""
    if len(name) <= room:
        return name
    end = room
    try:
        name.decode("utf-8")
    except UnicodeDecodeError:
        return name[:end]
    # A UTF-8 continuation byte is 0b10xxxxxx: back up to the start of a character.
    while end > 0 and (name[end] & 0xC0) == 0x80:
        end -= 1
    return name[:end]


def temp_name(name: bytes, tag: int) -> bytes:
    """The temporary file's name for a target named ``name``: ``.NAME.<tag, 16 hex>.tmp``, within
    :data:`NAME_MAX` bytes."""
    suffix = b".%016x.tmp" % (tag & 0xFFFF_FFFF_FFFF_FFFF)
    room = NAME_MAX - 1 - len(suffix)
    return b"." + shorten(name, room) + suffix


def _split(raw: bytes) -> Tuple[bytes, bytes]:
    directory, name = os.path.split(raw)
    if not name:
        raise OSError(errno.EINVAL, "the path has no file name", _str(raw))
    return directory or b".", name


def random_tag() -> int:
    """64 unpredictable bits (the kernel's random numbers)."""
    return int.from_bytes(os.urandom(8), "little")


def create_temp(path: PathArg, mode: int = 0o600) -> Tuple[int, bytes]:
    """Creates a fresh temporary file beside ``path`` (:func:`temp_name`), ``O_EXCL |
    O_NOFOLLOW``, with mode ``mode``; its open descriptor and its path. A name taken meanwhile is
    tried again with another."""
    directory, name = _split(os.fsencode(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    last: Optional[OSError] = None
    for _ in range(16):
        temp = os.path.join(directory, temp_name(name, random_tag()))
        try:
            fd = os.open(temp, flags, mode)
        except FileExistsError as e:
            last = e
            continue
        try:
            # The mode asked for, whatever the umask.
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            os.unlink(temp)
            raise
        return fd, temp
    assert last is not None
    raise last


def replace(path: PathArg, contents: bytes, mode: int = 0o600) -> None:
    """Writes ``contents`` as the whole file at ``path``, with mode ``mode``, through a temporary
    file beside it that is synced and renamed into place (see the module's documentation).
    Raises :class:`OSError` (a link, another user's file, a directory or a FIFO at ``path`` is
    refused, never followed nor replaced)."""
    raw = os.fsencode(path)
    check_destination(raw)
    fd, temp = create_temp(raw, mode)
    try:
        try:
            view = memoryview(contents)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        # Judged again just before the rename: the window left is the rename itself, and a rename
        # replaces a name, never writes through it.
        check_destination(raw)
        os.rename(temp, raw)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def read_regular(path: PathArg, follow: bool = False) -> Tuple[bytes, os.stat_result]:
    """The bytes of the regular file at ``path`` (as many as it held when opened) and its
    ``fstat``. Opened ``O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC``, and ``O_NOFOLLOW`` unless
    ``follow``. Raises :class:`OSError` (``filename`` the path): ``ELOOP`` for a link ("is a
    symbolic link; not read"), ``EINVAL`` for anything that is not a regular file ("is not a
    regular file (a FIFO); not read"), or the system's error."""
    raw = os.fsencode(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if not follow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(raw, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise OSError(errno.ELOOP, LINK_NOT_READ, _str(raw)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"is not a regular file ({_kind(st.st_mode)}); not read", _str(raw))
        parts = []
        left = st.st_size
        while left > 0:
            part = os.read(fd, min(left, 1 << 20))
            if not part:
                break
            parts.append(part)
            left -= len(part)
        return b"".join(parts), st
    finally:
        os.close(fd)
