"""Tests of a framework with a cache, each with a leak limit of 0: the one that keeps a tensor in
a module-level list leaks only when the cache is off (--cuguard-uncached)."""

import pytest

import fake_torch

pytestmark = pytest.mark.limit_gpu_leaks(0)

TENSORS = []


def test_temporary_tensor():
    t = fake_torch.empty(1 << 20)
    del t


def test_keeps_tensor():
    TENSORS.append(fake_torch.empty(3 << 20))  # leak: tensor


def test_another_temporary():
    fake_torch.empty(2 << 20)
