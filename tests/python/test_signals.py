"""The report at a terminating signal, as a supervisor sends it: a Python program under `cuguard
run --driver sim` that is sent SIGTERM dies of it, its report written first."""

import json
import sys
from pathlib import Path

from conftest import INNER, run_sim

# Jupyter's shutdown, slowed down: jupyter_client sends SIGTERM to the kernel's process group, and
# `cuguard run` forwards it to the kernel too, so a second SIGTERM reaches a thread of the kernel
# while the cuguard thread writes the report for the first (under CPU load, about one shutdown in
# 25 lost its report that way). Here the first is sent while the main thread sleeps (a signal sent
# to the process goes to its main thread first) and the second once the shim says the process is
# ending, so it lands on the sending thread: the main thread blocks SIGTERM while the shim's
# handler waits for the report. The live allocations make the report take a while.
TWICE = """
import os, signal, sys, threading, time
sys.path.insert(0, {inner!r})
import cuguard, gpu

held = [gpu.alloc(4096) for _ in range({count})]

def terminate_twice():
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 30
    while cuguard.active() and time.monotonic() < deadline:
        pass
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=terminate_twice, daemon=True).start()
time.sleep(60)
"""


def test_a_second_sigterm_while_the_report_is_written_is_held_until_it_is_in_place(tmp_path: Path):
    count = 3000
    script = tmp_path / "twice.py"
    script.write_text(TWICE.format(inner=str(INNER), count=count))
    report = tmp_path / "r.json"
    result = run_sim([sys.executable, str(script)], tmp_path, report=report, CUGUARD_PLUMBING="file:*/gpu.py")
    # It died of SIGTERM, as it would have without the shim (`cuguard run` passes 128+15 on).
    assert result.returncode == 128 + 15, (result.returncode, result.stderr)
    assert report.exists(), f"no report: {sorted(p.name for p in tmp_path.iterdir())}; {result.stderr}"
    final = json.loads(report.read_text())
    assert (final["reason"], final["complete"]) == ("signal", True), (final["reason"], final["complete"])
    assert final["signal"] == {"number": 15, "name": "SIGTERM"}, final["signal"]
    assert sum(1 for leak in final["leaks"] if leak["size"] == 4096) == count
