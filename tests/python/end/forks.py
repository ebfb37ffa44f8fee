"""A program with children that are not new programs: a multiprocessing child forked without
exec (its code ends with os._exit, as multiprocessing's forked children do), and a subprocess
whose exec fails (Python's subprocess then leaves its vfork child through _exit). The forked
child's end is its own; the parent's report is not disturbed by either."""

import multiprocessing
import os
import subprocess
import sys

import gpu

MiB = 1 << 20

KEPT = []


def child_work():
    KEPT.append(gpu.alloc(1 * MiB))  # child-kept
    gpu.alloc(2 * MiB)  # child-lost


def main():
    child = multiprocessing.get_context("fork").Process(target=child_work)
    child.start()
    child.join()
    print(f"child {child.pid} {child.exitcode}", flush=True)
    try:
        subprocess.run(["/nonexistent/cuguard-test-program"])
    except FileNotFoundError:
        pass
    KEPT.append(gpu.alloc(3 * MiB))  # parent-kept
    gpu.alloc(4 * MiB)  # parent-lost
    sys.exit(0)


if __name__ == "__main__":
    main()
