"""A program whose ctypes buffers (objects keeping only the integer address) are held at its end
by a module-level list and a global, and one whose handle it dropped (lost). The buffers free
themselves when collected, so the interpreter's teardown frees the held ones: only the end of the
program's code sees them."""

import os
import sys

if sys.flags.isolated:  # python -I leaves the script's directory off sys.path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu  # noqa: E402

MiB = 1 << 20

KEPT = []
WEIGHTS = None


class Buffer:
    """Device memory kept by its integer address, freed with the object."""

    def __init__(self, size):
        self.ptr = gpu.alloc(size)  # buffer

    def __del__(self):
        gpu.free(self.ptr)


class _Deprecated:
    """As `torch.distributed.reduce_op` is: every attribute read, `__class__` included, warns.
    Looking at what holds memory must not read it."""

    def __getattribute__(self, name):
        import warnings

        warnings.warn("reduce_op is deprecated (read by cuguard)", FutureWarning)
        return object.__getattribute__(self, name)


reduce_op = _Deprecated()


def load():
    global WEIGHTS
    KEPT.append(Buffer(1 * MiB))  # kept-list
    KEPT.append(Buffer(2 * MiB))  # kept-list-2
    WEIGHTS = Buffer(3 * MiB)  # kept-global
    scratch = Buffer(5 * MiB)  # freed
    del scratch
    gpu.alloc(4 * MiB)  # lost


def main():
    load()
    mode = sys.argv[1] if len(sys.argv) > 1 else "finish"
    if mode == "raise":
        raise ValueError("the program failed")
    if mode == "exit":
        sys.exit(3)
    if mode == "_exit":
        os._exit(4)
    if mode == "native_exit":  # libc's _exit, past Python's os._exit
        import ctypes

        libc = ctypes.CDLL(None)
        libc._exit.argtypes = [ctypes.c_int]
        libc._exit(5)


if __name__ == "__main__":
    main()
