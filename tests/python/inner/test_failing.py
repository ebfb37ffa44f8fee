"""A test that fails by its own assertion while its locals hold device memory."""

import pytest

from gpu import Buffer, MiB


@pytest.mark.limit_gpu_leaks(0)
def test_fails_holding_a_buffer():
    buffer = Buffer(MiB)
    assert buffer.address == 0
