"""Issue 22 with PyTorch (its caching allocator on, the default): memory given back, and CUDA IPC.

Usage (bare, or with LD_PRELOAD=.gpu/libcuguard.so; scripts/gpu/giveback.sh runs them side by side):
  python3 giveback_torch.py empty_cache
      A 3 GiB temporary, deleted, then torch.cuda.empty_cache(); then, without synchronizing,
      every 100 ms for 1 s: torch.cuda.mem_get_info()'s used bytes and (at 0, 0.5 and 1 s)
      nvidia-smi's memory of this process. One JSON line:
      {"info_used_gib": [...], "smi_mib": {"0": .., "500": .., "1000": ..}, "back_ms"}; back_ms: the
      first sample within 64 MiB of the level before the temporary, or null.
  python3 giveback_torch.py ipc [plain]
      torch.multiprocessing (spawn) shares CUDA tensors of 4 KiB, 4 MiB and 256 MiB with a child,
      which sums each and writes into it; the parent checks the sums and sees the child's write.
      With `plain`, the child runs without LD_PRELOAD (not under cuguard). One JSON line per size:
      {"bytes", "sum_ok", "child_write_seen", "child_preloaded", "error"}.
"""

import json
import os
import subprocess
import sys
import time

GiB = 1 << 30
MiB = 1 << 20


def smi_mib():
    """This process's memory as nvidia-smi says it (MiB), or None."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        ).stdout
    except Exception:
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(os.getpid()):
            return int(parts[1])
    return 0


def empty_cache():
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    base = total - free
    x = torch.ones(3 * GiB // 4, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    del x
    torch.cuda.empty_cache()
    t0 = time.perf_counter()
    info, smi, back = [], {}, None
    for i in range(11):
        time.sleep(max(0.0, t0 + i * 0.1 - time.perf_counter()))
        ms = round((time.perf_counter() - t0) * 1e3)
        free, total = torch.cuda.mem_get_info()
        used = total - free
        info.append(round(used / GiB, 3))
        if i in (0, 5, 10):
            smi[str(i * 100)] = smi_mib()
        if back is None and used - base < 64 * MiB:
            back = ms
    print(json.dumps({"info_used_gib": info, "smi_mib": smi, "back_ms": back}))


def child(q_in, q_out):
    import torch

    while True:
        item = q_in.get()
        if item is None:
            return
        t = item
        s = int(t.sum().item())
        t[0] = 7
        torch.cuda.synchronize()
        q_out.put((s, "LD_PRELOAD" in os.environ))


def ipc(plain):
    import torch
    import torch.multiprocessing as mp

    mp.set_start_method("spawn", force=True)
    if plain:
        # The child is spawned with this environment: no cuguard in it.
        os.environ.pop("LD_PRELOAD", None)
    q_in, q_out = mp.Queue(), mp.Queue()
    p = mp.Process(target=child, args=(q_in, q_out))
    p.start()
    for nbytes in (4 << 10, 4 << 20, 256 << 20):
        rec = {"bytes": nbytes}
        try:
            n = nbytes // 4
            t = (torch.arange(n, device="cuda", dtype=torch.int32) % 1000)
            want = int(t.sum().item())
            torch.cuda.synchronize()
            q_in.put(t)
            got, pre = q_out.get(timeout=120)
            rec["sum_ok"] = got == want
            rec["child_preloaded"] = pre
            torch.cuda.synchronize()
            rec["child_write_seen"] = int(t[0].item()) == 7
        except Exception as e:  # the failure: "operation not supported"
            rec["error"] = f"{type(e).__name__}: {e}"[:300]
        print(json.dumps(rec), flush=True)
        if "error" in rec:
            break
    q_in.put(None)
    p.join(timeout=60)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "empty_cache"
    if what == "empty_cache":
        empty_cache()
    elif what == "ipc":
        ipc(len(sys.argv) > 2 and sys.argv[2] == "plain")
    else:
        raise SystemExit(__doc__)
