"""`cuguard jupyter install-kernel`: a Jupyter kernel spec whose kernels run under the shim.

The spec's command is `PYTHON -m cuguard run [--driver D] [--report T] -- PYTHON -m
ipykernel_launcher -f {connection_file}`: `cuguard run` starts the kernel with the shim preloaded
and passes its exit status through. Jupyter signals the kernel's process group, so an interrupt
(SIGINT, which `cuguard run` ignores) reaches the kernel, and a shutdown or restart ends both.
Inside the kernel, `%load_ext cuguard` then `%cuguard` shows what it holds.
"""

import argparse
import errno
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import List, Optional

from . import _files

_EXAMPLES = """\
examples:
  cuguard jupyter install-kernel
      writes ~/.local/share/jupyter/kernels/cuguard/kernel.json: "Python 3 (cuguard)", this
      Python, the system's CUDA driver
  cuguard jupyter install-kernel --sys-prefix --name gpu-leaks --display-name "GPU (cuguard)"
      for this virtual environment only
  cuguard jupyter install-kernel --report '/tmp/reports/cuguard.%e.%p.json' --env CUGUARD_POOL=0

Then pick the kernel in Jupyter, and in a cell:
  %load_ext cuguard
  %cuguard             what this kernel holds now, by device, owner and site
"""

_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def _user_data_dir() -> Path:
    """Jupyter's per-user data directory, as jupyter_core computes it on Linux."""
    try:
        from jupyter_core.paths import jupyter_data_dir  # type: ignore

        return Path(jupyter_data_dir())
    except ImportError:
        pass
    given = os.environ.get("JUPYTER_DATA_DIR")
    if given:
        return Path(given)
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "jupyter"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cuguard jupyter",
        description="Jupyter support: kernels that run under cuguard's shim.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    install = commands.add_parser(
        "install-kernel",
        help="write a kernel spec whose kernels run under the shim",
        description=(
            "Write a Jupyter kernel spec (kernel.json) that starts an IPython kernel of PYTHON "
            "under cuguard's shim, through `cuguard run`. The kernel writes a report when it "
            "ends; `%load_ext cuguard` and `%cuguard` show what it holds while it runs."
        ),
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    install.add_argument(
        "--name", default="cuguard", help="the kernel's directory name (default: cuguard)"
    )
    install.add_argument(
        "--display-name",
        default=None,
        help='the name Jupyter shows (default: "Python 3 (cuguard)")',
    )
    where = install.add_mutually_exclusive_group()
    where.add_argument(
        "--user",
        action="store_true",
        help="install for this user (the default): Jupyter's user data directory",
    )
    where.add_argument(
        "--sys-prefix",
        action="store_true",
        help=f"install into this Python's prefix ({sys.prefix}/share/jupyter/kernels)",
    )
    where.add_argument(
        "--prefix", metavar="DIR", help="install into DIR/share/jupyter/kernels"
    )
    install.add_argument(
        "--python",
        metavar="PATH",
        default=sys.executable,
        help="the Python the kernel runs (it needs ipykernel and cuguard; default: this one)",
    )
    install.add_argument(
        "--driver",
        choices=("system", "sim"),
        default="system",
        help="which CUDA driver the kernel gets (default: system; sim: the simulated driver)",
    )
    install.add_argument(
        "--report",
        metavar="TEMPLATE",
        help="where the kernel's report goes (cuguard run --report; default: ./cuguard.%%e.%%p.json "
        "in the kernel's directory)",
    )
    install.add_argument(
        "--env",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="a setting for the kernel (e.g. CUGUARD_POOL=0); may be repeated",
    )
    return parser


def kernel_spec(args: argparse.Namespace) -> dict:
    """The kernel.json for `args` (see `install-kernel --help`)."""
    python = str(args.python)
    argv = [python, "-m", "cuguard", "run", "--driver", args.driver]
    if args.report:
        argv += ["--report", args.report]
    argv += ["--", python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env {item!r}: write NAME=VALUE")
        env[key] = value
    spec = {
        "argv": argv,
        "display_name": args.display_name or "Python 3 (cuguard)",
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"cuguard": {"driver": args.driver}},
    }
    if env:
        spec["env"] = env
    return spec


def install_kernel(args: argparse.Namespace) -> Path:
    """Writes the kernel spec; returns its directory."""
    if not _NAME.match(args.name):
        raise ValueError(f"--name {args.name!r}: use letters, digits, '.', '_' and '-' only")
    if args.prefix:
        top, below = Path(args.prefix), ["share", "jupyter", "kernels", args.name]
    elif args.sys_prefix:
        top, below = Path(sys.prefix), ["share", "jupyter", "kernels", args.name]
    else:
        top, below = _user_data_dir(), ["kernels", args.name]
    spec = kernel_spec(args)
    directory = _kernel_directory(top, below)
    # kernel.json is 0600: Jupyter reads it as the user who installed it, and it holds the
    # kernel's command line and settings. Written through a fresh temporary file beside it; a
    # link or another user's file at kernel.json is refused, never written through.
    _files.replace(directory / "kernel.json", (json.dumps(spec, indent=1) + "\n").encode(), 0o600)
    return directory


def _kernel_directory(top: Path, below: List[str]) -> Path:
    """The kernel's directory, ``top/below…``, made where missing, every directory on the way
    judged before anything is made in it (:func:`_check_directory`), from ``top`` down: a spec
    is only as safe as the directories above it, since whoever may rename one of them may put
    their own spec in its place. ``top`` is the prefix (or Jupyter's data directory) as given: a
    link there is followed; below it, a link is refused, never followed."""
    # 0755 whatever the umask (an open umask must not make a directory refused below).
    top.mkdir(mode=0o755, parents=True, exist_ok=True)
    _check_directory(top, os.stat(top), last=False)
    path = top
    for i, part in enumerate(below):
        path = path / part
        try:
            # mkdir never follows a link at `path` (it fails, and the link is refused below).
            os.mkdir(path, 0o755)
        except FileExistsError:
            pass
        _check_directory(path, os.lstat(path), last=i == len(below) - 1)
    return path


def _private_group(gid: int) -> bool:
    """Whether group ``gid`` is this user's own private group (the group of the user's name,
    their primary group, with no other member), so that its write permission is the user's."""
    try:
        import grp
        import pwd

        me = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == me.pw_gid and group.gr_name == me.pw_name and set(group.gr_mem) <= {me.pw_name}


def _check_directory(directory: Path, st: os.stat_result, last: bool) -> None:
    """A directory on the way to the kernel's (``last``: the kernel's own) must be safe from other
    users: Jupyter runs the command a kernel.json names, so a spec in (or below) a directory that
    another user owns, or may rename files in, is theirs to change. Not a link; a directory; this
    user's (or root's, above the kernel's own); not writable by its group (unless that is the
    user's private group) or by every user, unless sticky (as /tmp). Raises :class:`OSError`
    saying why not."""
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.EEXIST, "is a symbolic link; cuguard never writes through a link", str(directory))
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, "is not a directory", str(directory))
    if st.st_uid != os.geteuid() and (last or st.st_uid != 0):
        raise PermissionError(
            errno.EACCES,
            f"belongs to another user (uid {st.st_uid}), who could change the kernel's command; "
            "give another --prefix or --name",
            str(directory),
        )
    if st.st_mode & stat.S_ISVTX:
        return
    mode = stat.S_IMODE(st.st_mode)
    if st.st_mode & 0o002:
        raise PermissionError(
            errno.EACCES,
            f"can be written by every user (mode {mode:o}), who could replace the kernel's spec; "
            "give another --prefix or --name",
            str(directory),
        )
    if st.st_mode & 0o020 and not _private_group(st.st_gid):
        raise PermissionError(
            errno.EACCES,
            f"can be written by the users of group {st.st_gid} (mode {mode:o}), who could replace "
            "the kernel's spec; give another --prefix or --name",
            str(directory),
        )


def main(argv: List[str]) -> int:
    """`cuguard jupyter ARGV…`; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command != "install-kernel":
        parser.print_help(sys.stderr)
        return 2
    try:
        directory = install_kernel(args)
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"cuguard jupyter install-kernel: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"cuguard jupyter install-kernel: {e}", file=sys.stderr)
        return 2
    print(f"Installed kernel spec {args.name} in {directory}")
    if args.python == sys.executable:
        import importlib.util

        if importlib.util.find_spec("ipykernel") is None:
            print(
                f"note: {sys.executable} has no ipykernel yet: `{sys.executable} -m pip install "
                "ipykernel` before starting the kernel",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
