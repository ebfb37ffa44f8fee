"""CuPy with its pool on: one array kept in a global, two freed back to the pool."""

import cupy

KEEP = None


def main():
    global KEEP
    a = cupy.ones((1024, 1024), dtype=cupy.float32)
    b = cupy.ones((2048, 1024), dtype=cupy.float32)
    KEEP = cupy.arange(1 << 20, dtype=cupy.float32)  # mark: kept
    del a, b
    cupy.cuda.runtime.deviceSynchronize()


if __name__ == "__main__":
    main()
