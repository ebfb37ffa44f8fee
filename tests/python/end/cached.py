"""A program that keeps one block of the toy cache in a module global and lets two others go back
to the cache."""

import toycache

KEEP = None


def step():
    global KEEP
    a = toycache.CACHE.take()
    b = toycache.CACHE.take()
    KEEP = toycache.CACHE.take()  # kept-block
    del a, b


if __name__ == "__main__":
    step()
