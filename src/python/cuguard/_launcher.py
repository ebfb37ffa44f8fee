"""Where the package's native parts are, and how to start a process under the shim.

An installed `cuguard` distribution carries its native parts in `cuguard/_bin/`:

- `cuguard`, the command (the Rust binary);
- the shim, `libcuguard*.so` (the name setuptools-rust gives it, e.g. `libcuguard.abi3.so`);
- the simulated driver, `libcuguard_simcuda*.so`.

In a source checkout (the package imported from `src/python`, no `_bin/`), the command is the
`cuguard` executable found on `PATH` (a built `target/debug` or `target/release` directory), and
the libraries are found the way `cuguard run` finds them: `$CUGUARD_SHIM` and
`$CUGUARD_SIM_DRIVER`, else next to that executable, else in `<its dir>/../lib/cuguard/`.

`command_env()` is the environment the Python launcher gives the binary: it names the packaged
libraries in `CUGUARD_SHIM` and `CUGUARD_SIM_DRIVER` (unless they are set already), which is how
`cuguard run` finds them in a wheel. `shim_env(driver)` asks `cuguard run` itself which
`LD_PRELOAD` and `LD_LIBRARY_PATH` it gives a program, so that a process restarted under the shim
(the pytest plugin's restart) gets exactly what `cuguard run` would give it; `shim_env_said(driver)`
also returns what `cuguard run` said as it did (that no CUDA driver can be found, say), for the
caller to show.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, NoReturn, Optional, Tuple

from ._abi import VERSION

#: The directory of the packaged native parts.
BIN_DIR = Path(__file__).resolve().parent / "_bin"

#: File stems of the libraries (the part of the file name before its first dot).
SHIM_STEM = "libcuguard"
SIM_STEM = "libcuguard_simcuda"


class NotInstalled(RuntimeError):
    """A native part of cuguard (the command, the shim or the simulated driver) is missing."""


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def binary() -> Path:
    """The `cuguard` executable (the Rust binary, never this launcher's own script)."""
    packaged = BIN_DIR / "cuguard"
    if packaged.is_file():
        return packaged
    found = shutil.which("cuguard")
    if found and _is_elf(Path(found)):
        return Path(found).resolve()
    raise NotInstalled(
        "the cuguard command is not part of this installation "
        f"(no {packaged}, and no built cuguard executable on PATH); "
        f"install the distribution from its wheel (`pip install dist/cuguard-{VERSION}-*manylinux*.whl`, "
        "made by scripts/release-wheel.sh) or from a checkout (`pip install .`), "
        "or put a directory holding a built `cuguard` (target/debug) on PATH"
    )


def _packaged(stem: str) -> Optional[Path]:
    if not BIN_DIR.is_dir():
        return None
    for entry in sorted(BIN_DIR.iterdir()):
        name = entry.name
        if name.split(".", 1)[0] == stem and name.endswith(".so") and entry.is_file():
            return entry
    return None


def library(stem: str, variable: str) -> Path:
    """The shim (`SHIM_STEM`, `$CUGUARD_SHIM`) or the simulated driver (`SIM_STEM`,
    `$CUGUARD_SIM_DRIVER`), found as described in the module's documentation."""
    given = os.environ.get(variable)
    if given:
        path = Path(given)
        if path.is_file():
            return path.resolve()
        raise NotInstalled(f"{variable}={given}: no such file")
    packaged = _packaged(stem)
    if packaged is not None:
        return packaged
    looked: List[Path] = [BIN_DIR]
    try:
        exe_dir = binary().parent
    except NotInstalled:
        exe_dir = None
    if exe_dir is not None:
        for candidate in (exe_dir / f"{stem}.so", exe_dir / ".." / "lib" / "cuguard" / f"{stem}.so"):
            if candidate.is_file():
                return candidate.resolve()
            looked.append(candidate)
    raise NotInstalled(
        f"{stem}.so not found (looked at {', '.join(str(p) for p in looked)}); set {variable} "
        "or install the distribution"
    )


def shim() -> Path:
    """The shim, `libcuguard.so`."""
    return library(SHIM_STEM, "CUGUARD_SHIM")


def sim_driver() -> Path:
    """The simulated driver, `libcuguard_simcuda.so`."""
    return library(SIM_STEM, "CUGUARD_SIM_DRIVER")


def command_env(base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """`base` (default: this process's environment) with `CUGUARD_SHIM` and
    `CUGUARD_SIM_DRIVER` naming the packaged libraries where they are packaged and not set."""
    env = dict(os.environ if base is None else base)
    # Where this package is, for the bootstrap of a program run by another Python.
    env.setdefault("CUGUARD_PYTHON_PACKAGE", os.path.dirname(os.path.abspath(__file__)))
    for stem, variable in ((SHIM_STEM, "CUGUARD_SHIM"), (SIM_STEM, "CUGUARD_SIM_DRIVER")):
        if not env.get(variable):
            packaged = _packaged(stem)
            if packaged is not None:
                env[variable] = str(packaged)
    return env


def exec_command(args: List[str]) -> NoReturn:
    """Replaces this process with `cuguard ARGS…` (the Rust binary)."""
    exe = binary()
    env = command_env()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(str(exe), ["cuguard", *args], env)
    raise AssertionError("unreachable")


#: The variables `cuguard run` sets for the program it starts: the shim (and the shim as the
#: NVTX tool, for phases), the simulated driver,
#: the Python bootstrap that marks the end of a Python program's code, and where the bootstrap
#: loads cuguard's package from (never from the program's own path).
RUN_VARIABLES = (
    "LD_PRELOAD",
    "NVTX_INJECTION64_PATH",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "CUGUARD_PYTHON_BOOTSTRAP",
    "CUGUARD_PYTHON_PACKAGE",
)


#: Settings of this process's environment not passed on to a distributed job's workers: the
#: report's template (each job gives its workers their own) and the test harness's.
NOT_PASSED = ("CUGUARD_REPORT", "CUGUARD_TEST_PYTHON", "CUGUARD_EXPECT_INSTALLED")


def worker_env(driver: str, report: Optional[str], default_report: str, limit: Optional[object]) -> Dict[str, str]:
    """The variables the worker processes of a distributed job (Dask's, Ray's) start with:
    every ``CUGUARD_*`` setting of this process but :data:`NOT_PASSED`, what ``cuguard run
    --driver DRIVER`` sets (:func:`shim_env`), ``CUGUARD_REPORT`` (``report``, else this
    process's ``CUGUARD_REPORT``, else ``default_report``; it must hold ``%p`` so that two
    workers never write one file; made absolute) and ``CUGUARD_LIMIT`` when ``limit`` is given."""
    env: Dict[str, str] = {}
    for key, value in os.environ.items():
        if key.startswith("CUGUARD_") and key not in NOT_PASSED:
            env[key] = value
    shim = shim_env(driver)
    for key in RUN_VARIABLES:
        if key in shim:
            env[key] = shim[key]
    if report is None:
        report = os.environ.get("CUGUARD_REPORT") or default_report
    if "%p" not in report:
        raise ValueError(
            f"report={report!r}: the workers' report path must hold %p (the pid), "
            "so that two workers never write the same file"
        )
    env["CUGUARD_REPORT"] = os.path.abspath(report)
    if limit is not None:
        env["CUGUARD_LIMIT"] = str(limit)
    return env


def shim_env(driver: str = "system", base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment `cuguard run --driver DRIVER` would give a program started from `base`
    (default: this process's environment): `LD_PRELOAD` with the shim and, for the simulated
    driver, `LD_LIBRARY_PATH` with a directory whose `libcuda.so.1` is the simulated driver.

    It runs `cuguard run --driver DRIVER -- env -0` and reads what `env` was given, so the rules
    stay those of `cuguard run` alone. Raises `NotInstalled` when the command or a library is
    missing, and `RuntimeError` with `cuguard`'s message when `cuguard run` refuses.
    """
    return shim_env_said(driver, base)[0]


#: How the line `cuguard run` says when the program would find no CUDA driver (and `--driver sim`
#: was not given) starts (`NO_DRIVER` in src/cli/run.rs).
NO_DRIVER_START = "cuguard: no libcuda.so.1 "


def shim_env_said(
    driver: str = "system", base: Optional[Dict[str, str]] = None
) -> Tuple[Dict[str, str], List[str]]:
    """:func:`shim_env`, and the lines `cuguard run` said on its standard error as it started
    the program, for the caller to show where they would otherwise be lost: that no CUDA driver
    can be found (:data:`NO_DRIVER_START`), that a private directory was used."""
    if driver not in ("system", "sim"):
        raise ValueError(f"driver must be 'system' or 'sim', not {driver!r}")
    env = command_env(base)
    env_program = shutil.which("env") or "/usr/bin/env"
    proc = subprocess.run(
        [str(binary()), "run", "--quiet", "--driver", driver, "--", env_program, "-0"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        check=False,
    )
    if proc.returncode != 0:
        message = proc.stderr.decode(errors="replace").strip()
        raise RuntimeError(message or f"cuguard run exited with status {proc.returncode}")
    given = {}
    for entry in proc.stdout.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key.decode(errors="replace") in RUN_VARIABLES:
            given[key.decode()] = os.fsdecode(value)
    result = dict(os.environ if base is None else base)
    result.update(given)
    said = [line for line in proc.stderr.decode(errors="replace").splitlines() if line.strip()]
    return result, said
