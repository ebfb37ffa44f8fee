"""Tests with GPU memory limits: which pass and which fail is what the outer tests check."""

import pytest

from gpu import MiB, alloc, free

KEPT = []


def test_clean():
    free(alloc(2 * MiB))


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_leak_under_limit():
    KEPT.append(alloc(512 * 1024))  # leak: under


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_leak_over_limit():
    KEPT.append(alloc(2 * MiB))  # leak: over-first
    KEPT.append(alloc(MiB))  # leak: over-second


@pytest.mark.limit_gpu_memory("16 MiB")
def test_peak_under_limit():
    free(alloc(8 * MiB))


@pytest.mark.limit_gpu_memory("4 MiB")
def test_peak_over_limit():
    free(alloc(8 * MiB))


@pytest.fixture
def holder():
    blocks = []
    yield blocks
    for block in blocks:
        free(block)


@pytest.mark.limit_gpu_leaks(0)
def test_freed_by_fixture_teardown(holder):
    holder.append(alloc(4 * MiB))


def test_unlimited_leak():
    KEPT.append(alloc(4096))  # leak: unlimited
