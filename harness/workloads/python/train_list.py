"""train_list.py: a training loop as PyTorch programs write it, on tensorlib.py's stand-in
tensors: every step makes an 8 MiB temporary (`# temporary`) and appends one 1 MiB tensor to a
module-level list (`# appends`), as run 7's `torch_train_growth` on the H200 did
(`docs/compatibility.md`).

    python3 train_list.py [STEPS] [PAUSE_MS] [TEARDOWN_MS] [HOW]
    python3 -m train_list …

Each step sleeps PAUSE_MS (default 30) so that the shim's samples see the loop. The list is a
module global: nothing frees it before exit, and the interpreter's teardown frees it then. The
rest of the teardown takes TEARDOWN_MS (default: as long as the loop took), as PyTorch's own
does; what the report reads as the end of the run then comes long after the list fell, unless
the end of the program's code is marked (cuguard's Python bootstrap).

HOW (default `main`): `main` runs the loop on the main thread; `native-exit` runs it on another
thread while the main thread waits in native code (libc's `pause`, the GIL released), and that
thread leaves the process through libc's `exit`: no Python code runs on the main thread after
the first CUDA call, as in an embedded interpreter whose main thread stays in native code.

Prints one JSON line: steps, kept bytes, the loop's milliseconds.
"""

import ctypes
import json
import os
import sys
import threading
import time

if sys.flags.isolated:  # python -I leaves the script's directory off sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorlib  # noqa: E402

MiB = 1 << 20

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
pause = (int(sys.argv[2]) if len(sys.argv) > 2 else 30) / 1000
teardown_ms = int(sys.argv[3]) if len(sys.argv) > 3 else -1
how = sys.argv[4] if len(sys.argv) > 4 else "main"

history = []  # one tensor per step, freed by the interpreter's teardown


class Teardown:
    """The rest of the interpreter's teardown, after the list: a module global defined after
    `history`, so freed after it, that takes its time."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.sleep = time.sleep

    def __del__(self):
        self.sleep(self.seconds)


def train(steps):
    for step in range(steps):
        activation = tensorlib.empty(8 * MiB)  # temporary
        history.append(tensorlib.empty(MiB))  # appends
        del activation
        time.sleep(pause)


def main():
    started = time.monotonic()
    tensorlib.init()
    train(steps)
    took = time.monotonic() - started
    print(json.dumps({"steps": steps, "kept": len(history) * MiB, "loop_ms": round(took * 1000)}), flush=True)
    return took


if how == "main":
    took = main()
    teardown = Teardown(teardown_ms / 1000 if teardown_ms >= 0 else took)
elif how == "native-exit":
    libc = ctypes.CDLL(None)

    def main_thread_in_pause():
        # The main thread's system call, as the kernel shows it: 34 is pause(2) on x86_64. Until
        # it is there, the main thread may still run a bytecode (and the shim's pending call).
        try:
            with open(f"/proc/self/task/{os.getpid()}/syscall") as f:
                return f.read().split(" ", 1)[0] == "34"
        except OSError:
            return True

    def worker():
        deadline = time.monotonic() + 30
        while not main_thread_in_pause() and time.monotonic() < deadline:
            time.sleep(0.005)
        main()
        libc.exit(0)

    threading.Thread(target=worker).start()
    libc.pause()
else:
    raise SystemExit(f"unknown HOW {how!r}")
