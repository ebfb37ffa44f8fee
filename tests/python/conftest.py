"""The Python suite's shared setup: where the repository and the `cuguard` command are, how to run
a program under the shim on the simulated driver, and the inner test projects (`inner/`) that
the plugin's tests run with pytester.

The suite runs in a Python environment that has the package installed: CI's virtual environment
(built from the wheel by `.ci/run`, named by `CUGUARD_TEST_PYTHON` for the integration test
`tests/it/python.rs`), or the development environment that test makes (the checkout's
`src/python` on the path, the built `target/<profile>` directory on `PATH`). Every test here
runs on the simulated driver; none needs a GPU.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

pytest_plugins = ["pytester"]

# The inner projects are run by the tests, never collected as tests of this suite.
collect_ignore = ["inner", "end", "clients"]

ROOT = Path(__file__).resolve().parents[2]
INNER = Path(__file__).resolve().parent / "inner"
END = Path(__file__).resolve().parent / "end"


def installed() -> bool:
    """Whether the package was installed from a wheel (its native parts in `cuguard/_bin/`)."""
    from cuguard import _launcher

    return (_launcher.BIN_DIR / "cuguard").is_file()


def cuguard_command() -> List[str]:
    """The `cuguard` command of this environment: the console script next to this Python when
    the distribution is installed; in the development environment, which has no console script,
    what that script runs, `python -m cuguard` (the launcher, which runs the built binary on
    PATH)."""
    script = Path(sys.executable).parent / "cuguard"
    if installed():
        assert script.is_file(), f"the distribution is installed but {script} is missing"
        return [str(script)]
    return [sys.executable, "-m", "cuguard"]


def clean_env(**extra: str) -> Dict[str, str]:
    """This environment without the shim's and the plugin's variables, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CUGUARD_")
        and k not in ("LD_PRELOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTEST_ADDOPTS")
        and not k.startswith("PYTEST_XDIST")
    }
    env.update(extra)
    return env


def run(args: List[str], cwd: Path, env: Optional[Dict[str, str]] = None, timeout: float = 120):
    """Runs a command; returns the CompletedProcess with text output."""
    return subprocess.run(
        args,
        cwd=str(cwd),
        env=env if env is not None else clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )


def run_sim(args: List[str], cwd: Path, report: Optional[Path] = None, **env: str):
    """Runs ARGS under `cuguard run --driver sim` (quiet unless no report is asked for)."""
    command = cuguard_command() + ["run", "--driver", "sim"]
    if report is not None:
        command += ["--report", str(report), "--quiet"]
    return run(command + ["--"] + args, cwd, clean_env(**env))


def marked_line(path: Path, marker: str) -> int:
    """The number of the line of `path` that ends with the comment `# MARKER`."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# {marker}"):
            return number
    raise AssertionError(f"no line marked {marker!r} in {path}")


def load_report(path: Path) -> dict:
    with open(path) as f:
        return json.load(f)


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.fixture
def inner_project(pytester: pytest.Pytester):
    """Copies the inner test project's files (`inner/*.py`) into pytester's directory; returns
    a function that gives the line of a marked line in one of them."""
    for source in sorted(INNER.glob("*.py")):
        (pytester.path / source.name).write_text(source.read_text())

    def line(file: str, marker: str) -> int:
        return marked_line(pytester.path / file, marker)

    return line
