"""IPython and Jupyter: `%load_ext cuguard` and the `%cuguard` magic in an IPython shell run
under the shim on the simulated driver, and `cuguard jupyter install-kernel`."""

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import INNER, clean_env, cuguard_command, run, run_sim

SHELL = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

ip = InteractiveShell.instance()
sys.path.insert(0, {inner!r})
outputs = {{}}

def cell(code):
    # As a kernel runs cells: each counted, so IPython names it Cell In[N].
    result = ip.run_cell(code, store_history=True)
    assert result.success, result.error_in_exec or result.error_before_exec

def magic(name, line):
    with capture_output() as captured:
        ip.run_line_magic("cuguard", line)
    outputs[name] = [o.data for o in captured.outputs]

cell("%load_ext cuguard")
cell("import gpu")
cell("weights = gpu.alloc(3 << 20)\\nbias = gpu.alloc(1 << 20)")
cell("gpu.free(gpu.alloc(8 << 20))")
magic("holds", "")
magic("snapshot", "snapshot " + {snapshot!r})
try:
    ip.run_line_magic("cuguard", "bogus")
except Exception as e:
    outputs["bogus"] = [type(e).__name__, str(e).splitlines()[0]]
print(json.dumps(outputs))
"""


def run_shell(tmp_path: Path, under_shim: bool = True) -> dict:
    script = tmp_path / "shell.py"
    snapshot = tmp_path / "snapshot.json"
    script.write_text(SHELL.format(inner=str(INNER), snapshot=str(snapshot)))
    if under_shim:
        result = run_sim(
            [sys.executable, str(script)],
            tmp_path,
            report=tmp_path / "final.json",
            CUGUARD_PLUMBING="file:*/gpu.py",
        )
    else:
        result = run([sys.executable, str(script)], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_magic_shows_what_the_kernel_holds(tmp_path: Path):
    outputs = run_shell(tmp_path)
    [holds] = outputs["holds"]
    text = holds["text/plain"].splitlines()
    assert text[0] == f"cuguard: what process {text[0].split()[3]} holds now"
    assert text[1] == "device 0 — NVIDIA H200 (16.0 GiB): 4.0 MiB live in 2 allocations, peak 12.0 MiB"
    assert text[2].startswith("  contexts open: 0 (primary, 0x")
    assert len(text) == 5
    # Each held by its notebook variable (an int inside it: cuguard.snapshot(held=True)).
    assert text[3].split(None, 6)[:6] == ["3.0", "MiB", "1", "the", "program:", "held"]
    assert text[4].split(None, 6)[:6] == ["1.0", "MiB", "1", "the", "program:", "held"]
    # Both were made on the first and second lines of the third cell, named as IPython names it.
    assert text[3].endswith("  <module> (Cell In[3], line 1)"), text
    assert text[4].endswith("  <module> (Cell In[3], line 2)"), text
    html = holds["text/html"]
    assert html.startswith('<div class="cuguard">') and html.count("<tr>") == 3
    assert "<b>device 0 — NVIDIA H200 (16.0 GiB)</b>" in html
    assert "width:90px" in html and "width:30px" in html  # the bars: 3/4 and 1/4 of 120px

    [written] = outputs["snapshot"]
    assert written["text/plain"] == (
        f"cuguard: report written to {tmp_path / 'snapshot.json'}: 2 live allocations, 4.0 MiB"
    )
    report = json.loads((tmp_path / "snapshot.json").read_text())
    assert sorted(l["size"] for l in report["leaks"]) == [1 << 20, 3 << 20]
    assert outputs["bogus"][0] == "UsageError"
    assert outputs["bogus"][1] == "%cuguard: unknown subcommand 'bogus'"

    # The end is the shell's exit, before IPython's own exit handler clears its namespace: the
    # two are held by their names there, though the teardown freed nothing (ints free nothing).
    final = json.loads((tmp_path / "final.json").read_text())
    end = final["python"]
    assert end["end"]["recorded"] is True and end["end"]["how"] == "finished", end
    held = {a["size"]: a["holders"][0]["path"][0] for a in end["view"]["allocations"]}
    assert held == {3 << 20: "weights", 1 << 20: "bias"}, end["view"]


CELLS = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

ip = InteractiveShell.instance()
sys.path.insert(0, {inner!r})

def cell(code):
    result = ip.run_cell(code, store_history=True)
    assert result.success, result.error_in_exec or result.error_before_exec

# Cell 1 runs before the extension is loaded: its name is told when it is.
cell("import gpu\\nearly = gpu.alloc(2 << 20)")
cell("%load_ext cuguard")
cell("x = 1\\nlate = gpu.alloc(5 << 20)")
with capture_output() as captured:
    ip.run_line_magic("cuguard", "")
files = sorted(ip.compile._filename_map.items(), key=lambda kv: kv[1])
print(json.dumps({{"holds": captured.outputs[0].data["text/plain"], "files": files}}))
"""


def test_cells_are_named_as_ipython_names_them(tmp_path: Path):
    script = tmp_path / "cells.py"
    script.write_text(CELLS.format(inner=str(INNER)))
    final = tmp_path / "final.json"
    result = run_sim(
        [sys.executable, str(script)], tmp_path, report=final, CUGUARD_PLUMBING="file:*/gpu.py"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    rows = out["holds"].splitlines()[3:]
    assert [r.split(None, 2)[:2] for r in rows] == [["5.0", "MiB"], ["2.0", "MiB"]], rows
    assert rows[0].endswith("  <module> (Cell In[3], line 2)"), rows
    assert rows[1].endswith("  <module> (Cell In[1], line 2)"), rows
    # The report at the end: frames keep IPython's file and get the cell's name.
    files = {number: name for name, number in out["files"]}
    report = json.loads(final.read_text())
    stacks = {s["id"]: s for s in report["stacks"]}
    frames = {
        (f["file"], f.get("display"))
        for leak in report["leaks"]
        for f in stacks[leak["stack"]].get("python", [])
        if f["file"].startswith("<ipython-input-")
    }
    assert frames == {(files[1], "Cell In[1]"), (files[3], "Cell In[3]")}, frames
    summary = run(cuguard_command() + ["summary", str(final)], tmp_path)
    assert summary.returncode == 0, summary.stderr
    assert "<module> (Cell In[3], line 2)" in summary.stdout, summary.stdout
    assert "<module> (Cell In[1], line 2)" in summary.stdout, summary.stdout
    assert "ipython-input" not in summary.stdout, summary.stdout


def test_magic_outside_the_shim_says_how_to_get_there(tmp_path: Path):
    script = tmp_path / "plain.py"
    script.write_text(
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "from IPython.utils.capture import capture_output\n"
        "ip = InteractiveShell.instance()\n"
        "ip.run_line_magic('load_ext', 'cuguard')\n"
        "with capture_output() as c:\n"
        "    ip.run_line_magic('cuguard', '')\n"
        "print(c.outputs[0].data['text/plain'])\n"
    )
    result = run([sys.executable, str(script)], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "cuguard: this kernel is not running under cuguard's shim, so there is nothing to show. "
        "Install a kernel that is (`cuguard jupyter install-kernel`, then pick \"Python 3 "
        "(cuguard)\") or start Jupyter under it (`cuguard run -- jupyter lab`)."
    )


def test_install_kernel_writes_a_spec_that_starts_python_under_the_shim(tmp_path: Path):
    prefix = tmp_path / "prefix"
    result = run(
        cuguard_command()
        + ["jupyter", "install-kernel", "--prefix", str(prefix), "--name", "leaks",
           "--driver", "sim", "--report", "/tmp/k.%p.json", "--env", "CUGUARD_POOL=0"],
        tmp_path,
    )
    directory = prefix / "share" / "jupyter" / "kernels" / "leaks"
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"Installed kernel spec leaks in {directory}\n"
    spec = json.loads((directory / "kernel.json").read_text())
    python = sys.executable
    # The command's Python may be named `python3` where the test's is `python` (a virtual
    # environment's two names for one interpreter): compare what they are.
    for i in (0, 9):
        assert os.path.realpath(spec["argv"][i]) == os.path.realpath(python), spec["argv"]
        spec["argv"][i] = python
    assert spec == {
        "argv": [python, "-m", "cuguard", "run", "--driver", "sim", "--report", "/tmp/k.%p.json",
                 "--", python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (cuguard)",
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {"cuguard": {"driver": "sim"}},
        "env": {"CUGUARD_POOL": "0"},
    }
    # What the spec starts is under the shim: its command with a probe in the kernel's place.
    argv = spec["argv"]
    probe = argv[: argv.index("--") + 1] + [
        python, "-c", "import cuguard, os; print(cuguard.active(), os.environ['CUGUARD_POOL'])"
    ]
    env = clean_env(**spec["env"])
    started = run(probe, tmp_path, env)
    assert (started.returncode, started.stdout) == (0, "True 0\n"), started.stderr


def test_install_kernel_user_directory_help_and_bad_input(tmp_path: Path):
    data = tmp_path / "data"
    env = clean_env(JUPYTER_DATA_DIR=str(data))
    result = run(cuguard_command() + ["jupyter", "install-kernel"], tmp_path, env)
    assert result.returncode == 0, result.stderr
    spec = json.loads((data / "kernels" / "cuguard" / "kernel.json").read_text())
    assert spec["argv"][3:6] == ["run", "--driver", "system"]
    assert "env" not in spec
    helped = run(cuguard_command() + ["jupyter", "install-kernel", "--help"], tmp_path)
    assert helped.returncode == 0
    assert helped.stdout.startswith("usage: cuguard jupyter install-kernel [-h] [--name NAME]")
    assert "examples:\n  cuguard jupyter install-kernel\n" in helped.stdout
    bad = run(cuguard_command() + ["jupyter", "install-kernel", "--name", "a/b"], tmp_path, env)
    assert (bad.returncode, bad.stderr) == (
        2,
        "cuguard jupyter install-kernel: --name 'a/b': use letters, digits, '.', '_' and '-' only\n",
    )
    nothing = run(cuguard_command() + ["jupyter"], tmp_path)
    assert nothing.returncode == 2 and nothing.stderr.startswith("usage: cuguard jupyter")


def test_magic_usage_errors_name_the_subcommand():
    from IPython.core.error import UsageError

    from cuguard.ipython import cuguard_magic

    with pytest.raises(UsageError, match="^%cuguard snapshot takes one PATH"):
        cuguard_magic("snapshot")
    with pytest.raises(UsageError, match="^%cuguard holders --min-bytes: 'x' is not a size"):
        cuguard_magic("holders --min-bytes x")
    with pytest.raises(UsageError, match="^%cuguard: No closing quotation"):
        cuguard_magic("snapshot 'x")


KERNEL_CLIENT = """
import json, sys
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name="leaks", startup_timeout=60)
outputs = []

def cell(code):
    texts = []

    def hook(msg):
        content = msg.get("content", {{}})
        if msg["msg_type"] in ("display_data", "execute_result"):
            texts.append(content["data"].get("text/plain", ""))
        elif msg["msg_type"] == "stream":
            texts.append(content["text"])
        elif msg["msg_type"] == "error":
            texts.append("ERROR " + content["ename"] + ": " + content["evalue"])

    reply = kc.execute_interactive(code, output_hook=hook, timeout=60)
    assert reply["content"]["status"] == "ok", (code, texts)
    return "".join(texts)

cell("import sys; sys.path.insert(0, {inner!r}); import gpu")
cell("weights = gpu.alloc(3 << 20)\\ndropped = gpu.alloc(1 << 20)\\ndel dropped")
outputs.append(cell("%load_ext cuguard"))
outputs.append(cell("%cuguard"))
# A loaded machine, as the kernel sees it: busy loops in its own session (the scheduler shares
# the CPU between sessions, so a build elsewhere barely slows it), detached (ipykernel's
# shutdown waits for its own children), not under the shim. A bare ipykernel leaves in about
# 0.65 s so loaded on a quiet machine, where jupyter_client sends SIGTERM at 2.5 s and SIGKILL
# at 5 s; CI's own load on top can take it past the first.
busy = cell(
    "import os, subprocess\\n"
    "_env = {{k: v for k, v in os.environ.items() if not k.startswith('CUGUARD') and k not in ('LD_PRELOAD', 'PYTHONPATH')}}\\n"
    "_sh = 'for i in 1 2 3 4; do (while :; do :; done) >/dev/null 2>&1 </dev/null & echo $!; done'\\n"
    "print(subprocess.run(['sh', '-c', _sh], env=_env, capture_output=True, text=True).stdout.replace(chr(10), ' '))"
)
kc.stop_channels()
try:
    km.shutdown_kernel(now=False)
finally:
    import os, signal
    for pid in busy.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
status = getattr(km, "_shutdown_status", None)
print(json.dumps({{"outputs": outputs, "pid": km.provisioner.pid if km.provisioner else None,
                   "shutdown": getattr(status, "name", str(status))}}))
"""


def test_a_real_kernels_end_is_its_shutdown_and_the_magic_shows_it_live(tmp_path: Path):
    """A Jupyter kernel (ipykernel, started by jupyter_client from the spec `cuguard jupyter
    install-kernel` writes): `%cuguard` shows the notebook variable's allocation held and the
    dropped one lost while the kernel runs, and the kernel's report, written at its shutdown,
    has the same classes, its end `kernel_shutdown`, and the cells named as IPython names them."""
    pytest.importorskip("ipykernel")
    pytest.importorskip("jupyter_client")
    prefix = tmp_path / "prefix"
    report = tmp_path / "kernel.json"
    installed = run(
        cuguard_command()
        + ["jupyter", "install-kernel", "--prefix", str(prefix), "--name", "leaks", "--driver", "sim",
           "--report", str(report), "--env", "CUGUARD_PLUMBING=file:*/gpu.py"],
        tmp_path,
    )
    assert installed.returncode == 0, installed.stderr
    env = clean_env(JUPYTER_PATH=str(prefix / "share" / "jupyter"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"))
    client = run([sys.executable, "-c", KERNEL_CLIENT.format(inner=str(INNER))], tmp_path, env)
    assert client.returncode == 0, client.stderr
    said = json.loads(client.stdout.splitlines()[-1])
    # The kernel left within jupyter_client's wait, on its own or at its SIGTERM (which the shim
    # answers by writing the report, the end already marked and classified), never killed.
    assert said["shutdown"] in ("ShutdownRequest", "SigtermRequest"), said["shutdown"]
    outputs = said["outputs"]
    live = outputs[1]
    assert "3.0 MiB" in live and "1.0 MiB" in live, live
    lines = live.splitlines()
    held = [l for l in lines if "3.0 MiB" in l]
    lost = [l for l in lines if "1.0 MiB" in l]
    assert held and "held" in held[0] and "(Cell In[2], line 1)" in held[0], live
    assert lost and "lost" in lost[0] and "(Cell In[2], line 2)" in lost[0], live

    # jupyter_client's shutdown returned once `cuguard run` was gone, which waits for the kernel:
    # the kernel has ended, and its report is in place (the second SIGTERM that `cuguard run`
    # forwards is held until the report the first one asked for is written: test_signals.py).
    assert report.exists(), (said["shutdown"], sorted(p.name for p in tmp_path.iterdir()), client.stderr[-2000:])
    final = json.loads(report.read_text())
    python = final["python"]
    assert python["end"]["recorded"] is True and python["end"]["how"] == "kernel_shutdown", python["end"]
    classes = {a["size"]: a["class"] for a in python["view"]["allocations"]}
    assert classes == {3 << 20: "held", 1 << 20: "lost"}, python["view"]
    # The look at the shutdown ended inside jupyter_client's wait before SIGTERM (2.5 s): its walk
    # takes what is left of cuguard._end.KERNEL_SHUTDOWN_SECS (0.2 s) after the collection of the
    # objects, which grows with the kernel's heap and the machine's load (1.36 s seen in CI on 2 busy
    # cores).
    assert python["view"]["elapsed_ms"] < 2500, python["view"]
    held = [a for a in python["view"]["allocations"] if a["class"] == "held"][0]
    assert held["holders"][0]["path"][0] == "weights"
    summary = run(cuguard_command() + ["summary", str(report)], tmp_path)
    text = summary.stdout
    assert "the end  the program's code ended with the kernel's shutdown" in text, text
    assert "<module> (Cell In[2], line 2)" in text.split("lost at the end")[1], text
