"""A small suite of PyTorch and CuPy tests with leak limits, run on the H200 by check.sh's
`python` section with `pytest --cuguard` (issue 11): with `--cuguard-uncached`, exactly
`test_torch_keeps_a_tensor` and `test_cupy_keeps_an_array` fail, naming the lines marked
`# mark: kept` and `# mark: kept-cupy`; without it (issue 21), the same two fail, from the
frameworks' own books of their caches (PyTorch's memory history, cuguard's hook in CuPy's pool)."""

import cupy
import pytest
import torch

pytestmark = pytest.mark.limit_gpu_leaks("1 MiB")

KEPT = []


def test_torch_matmul():
    a = torch.randn(1024, 1024, device="cuda")
    b = a @ a
    torch.cuda.synchronize()
    assert b.shape == (1024, 1024)


def test_torch_training_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 256, device="cuda")
    y = torch.randint(0, 10, (64,), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    assert torch.isfinite(loss).item()


def test_torch_keeps_a_tensor():
    t = torch.ones(1024, 1024, 4, device="cuda")  # mark: kept
    KEPT.append(t)
    assert KEPT[-1].sum().item() == 4 * 1024 * 1024


def test_cupy_keeps_an_array():
    a = cupy.ones((1024, 1024, 2), dtype=cupy.float32)  # mark: kept-cupy
    KEPT.append(a)
    assert float(a.sum()) == 2 * 1024 * 1024


def test_cupy_sum():
    x = cupy.arange(1_000_000, dtype=cupy.float64)
    assert float(x.sum()) == 499999500000.0


@pytest.mark.limit_gpu_memory("64 MiB")
def test_cupy_elementwise():
    x = cupy.ones((1024, 1024), dtype=cupy.float32)
    y = cupy.sqrt(x * 4)
    assert float(y.mean()) == 2.0
