"""call_paths_torch.py: PyTorch allocations through one helper, alloc(), called from three lines;
what the program keeps is the caller's doing (issue 50, on the GPU: scripts/gpu/call_paths.sh).

    python3 call_paths_torch.py          main keeps 32 MiB (the old leak); load and step free theirs
    python3 call_paths_torch.py new      the same, and step also keeps its 256 MiB temporary

It prints the lines: `alloc <line>`, `keep <line>`, `load <line>`, `step <line>`.
"""

import sys

import torch

kept = []


def alloc(mib):
    return torch.empty(mib << 20, dtype=torch.uint8, device="cuda")  # line: alloc


def load():
    weights = alloc(64)  # line: load
    weights.fill_(1)
    del weights


def step(forget):
    temporary = alloc(256)  # line: step
    temporary.fill_(2)
    if forget:
        kept.append(temporary)


def main():
    kept.append(alloc(32))  # line: keep
    load()
    step(len(sys.argv) > 1 and sys.argv[1] == "new")
    torch.cuda.synchronize()
    with open(__file__) as f:
        for number, text in enumerate(f, 1):
            for marker in ("alloc", "keep", "load", "step"):
                if text.rstrip().endswith("# line: " + marker):
                    print(marker, number)


main()
