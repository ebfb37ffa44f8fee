"""The frameworks' out-of-memory errors as cards (``cuguard._oom``): the wrapper of an error's
``__init__`` leaves the error as the framework made it, calls the card once an error, survives a
card that fails, and wraps a class once; the bytes a JAX error asked are read from each wording
XLA uses. The cards themselves run under the shim in `tests/it/framework_oom.rs`."""

from typing import Any, List

from cuguard import _oom


class FrameworkError(MemoryError):
    def __init__(self, size: int, total: int, limit: int = 0) -> None:
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes).")
        self.size = size


def test_the_error_is_made_as_the_framework_made_it_and_its_card_called_once(monkeypatch) -> None:
    monkeypatch.setattr(_oom, "_sent", [0])
    seen: List[Any] = []

    class Error(FrameworkError):
        pass

    assert _oom._wrap_init(Error, lambda e, *args: seen.append((e, args)) or True)
    e = Error(512, 1024)
    assert str(e) == "Out of memory allocating 512 bytes (allocated so far: 1,024 bytes)."
    assert e.size == 512
    assert seen == [(e, (512, 1024))]
    # Wrapped once: a second wrap is refused, and one error still makes one card.
    assert not _oom._wrap_init(Error, lambda e, *args: seen.append("again") or True)
    Error(1, 2)
    assert len(seen) == 2 and seen[-1][1] == (1, 2)


def test_a_card_that_fails_changes_nothing_and_counts_no_card(monkeypatch) -> None:
    monkeypatch.setattr(_oom, "_sent", [0])

    class Error(FrameworkError):
        pass

    def failing(*_: Any) -> bool:
        raise RuntimeError("the framework's figures could not be read")

    _oom._wrap_init(Error, failing)
    e = Error(7, 8)
    assert e.size == 7 and isinstance(e, MemoryError)
    assert _oom._sent == [0]


def test_no_more_than_max_cards_are_made(monkeypatch) -> None:
    monkeypatch.setattr(_oom, "_sent", [0])
    calls: List[int] = []

    class Error(FrameworkError):
        pass

    _oom._wrap_init(Error, lambda e, size, *rest: calls.append(size) or True)
    for n in range(_oom.MAX_CARDS + 5):
        Error(n, 0)
    assert calls == list(range(_oom.MAX_CARDS))


def test_the_bytes_a_jax_error_asked_are_read_in_each_of_xla_s_wordings() -> None:
    for text, asked in [
        ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.", 17179869184),
        ("RESOURCE_EXHAUSTED: Failed to allocate request for 16.00GiB (17179869184B) on device ordinal 0", 17179869184),
        ("RESOURCE_EXHAUSTED: Out of memory allocating 4096 bytes", 4096),
        # JAX 0.11.2 on the H100 (docs/gpu-runs/2026-12-07-run46): a size in GiB, two decimals.
        (
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 59.38GiB with allocator "
            "GPU_0_bfc on device 0. [executable_name='jit_broadcast_in_dim'] [tf-allocator-allocation-error='']",
            int(59.38 * (1 << 30)),
        ),
        ("INTERNAL: Failed to open libtpu.so", 0),
    ]:
        assert _oom._asked(text) == asked, text
    assert _oom._DEVICE.search("allocator GPU_0_bfc on device 3.").group(1) == "3"
