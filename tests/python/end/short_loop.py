"""A loop that keeps a 1 MiB buffer per step in a module-level list: growth, but over 20 steps
that take a few milliseconds, far fewer than the 5 samples at 100 ms that growth needs to be
told. The list is freed at teardown, so nothing leaks; at the end it holds 20 alike buffers."""

import os
import sys

if sys.flags.isolated:  # python -I leaves the script's directory off sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu  # noqa: E402

MiB = 1 << 20

KEPT = []


class Buffer:
    """Device memory kept by its integer address, freed with the object."""

    def __init__(self, size):
        self.ptr = gpu.alloc(size)  # step

    def __del__(self):
        gpu.free(self.ptr)


def main():
    for _ in range(20):
        KEPT.append(Buffer(1 * MiB))  # keep


if __name__ == "__main__":
    main()
