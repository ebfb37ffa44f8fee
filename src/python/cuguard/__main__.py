"""The `cuguard` command of the Python distribution, and `python -m cuguard`.

Both are the Rust `cuguard` binary shipped in the package (`cuguard/_bin/cuguard`): this launcher
replaces itself with it (`os.execve`: the same process, so exit status and signals are the
binary's), after naming the packaged shim and simulated driver in `CUGUARD_SHIM` and
`CUGUARD_SIM_DRIVER` so that `cuguard run` finds them.

One subcommand is the launcher's own, because it needs this Python: `cuguard jupyter
install-kernel` (see `cuguard._jupyter`). `cuguard --help` prints the binary's help and then that
subcommand.
"""

import subprocess
import sys
from typing import List, Optional

from . import _launcher

_MORE_HELP = """\
Installed with the Python package (its wheel, or `pip install .` in a checkout):
  jupyter       Jupyter: `cuguard jupyter install-kernel` writes a kernel spec whose kernels run
                under the shim (see `cuguard jupyter install-kernel --help`)
  python -m cuguard ...   is the same command
"""


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the command with `argv` (default: `sys.argv[1:]`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "jupyter":
        from . import _jupyter

        return _jupyter.main(args[1:])
    try:
        if args in (["--help"], ["-h"], ["help"]):
            status = subprocess.call([str(_launcher.binary()), *args], env=_launcher.command_env())
            sys.stdout.write("\n" + _MORE_HELP)
            return status
        _launcher.exec_command(args)
    except _launcher.NotInstalled as e:
        print(f"cuguard: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"cuguard: cannot start the cuguard binary: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
