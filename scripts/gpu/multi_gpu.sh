#!/usr/bin/env bash
# Issue 13, for the nvidia-h200-x2 machine (two GPUs): torchrun with two NCCL ranks (one per GPU),
# pool on and off, and the peer late-write check (peer_late_write.cu). Run from the repository root
# after scripts/gpu/stage.sh: bash scripts/gpu/multi_gpu.sh. Writes $OUT/multi_gpu.md and a tarball.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
M=/tmp/cuguard-multi
rm -rf $M; mkdir -p $M
S=$PWD/.gpu/libcuguard.so
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=$PWD/.gpu:$PATH
nvidia-smi -L > $M/gpus.txt 2>&1
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())' >> $M/gpus.txt 2>&1
cat $M/gpus.txt
{
  echo "| run | result |"
  echo "|---|---|"
  port=29600
  for v in plain pool pool-off; do
    mkdir -p $M/$v
    port=$((port + 1))
    case $v in
      plain) pre=() ;;
      pool) pre=(cuguard run --quiet --report "$M/$v/cuguard.%e.rank%r.%p.json" --) ;;
      pool-off) pre=(env CUGUARD_POOL=0 cuguard run --quiet --report "$M/$v/cuguard.%e.rank%r.%p.json" --) ;;
    esac
    timeout 300 "${pre[@]}" python3 -m torch.distributed.run --nproc_per_node=2 --master_port=$port \
      scripts/gpu/ddp_train.py $M/$v nccl > $M/$v.log 2>&1
    rc=$?
    same=$(python3 - "$M" "$v" <<'PY'
import json, sys, os
m, v = sys.argv[1], sys.argv[2]
def losses(x):
    try:
        return [json.load(open(os.path.join(m, x, f"losses.rank{r}.json")))["losses"] for r in (0, 1)]
    except OSError:
        return None
a, b = losses("plain"), losses(v)
print("no losses" if b is None else ("losses identical to plain" if a == b else "losses DIFFER"))
PY
)
    line="rc $rc, $same"
    if [ $v != plain ]; then
      cuguard merge --by rank -o $M/$v.merged.json $M/$v/cuguard.*.json > $M/$v.merge.log 2>&1
      cuguard summary --by rank $M/$v.merged.json > $M/$v.summary.txt 2>&1
      nccl=$(grep -c "NCCL" $M/$v.summary.txt)
      line="$line; $(ls $M/$v/cuguard.*.json 2>/dev/null | wc -l) reports; $nccl summary lines name NCCL; $(head -1 $M/$v.summary.txt)"
    fi
    echo "| torchrun nccl, $v | $line |"
  done
  /usr/local/cuda/bin/nvcc -O1 -o $M/peer_late_write scripts/gpu/peer_late_write.cu
  for v in bare pool pool-off; do
    case $v in
      bare) env=() ;;
      pool) env=(LD_PRELOAD=$S) ;;
      pool-off) env=(LD_PRELOAD=$S CUGUARD_POOL=0) ;;
    esac
    line=$(env "${env[@]}" CUGUARD_QUIET=1 CUGUARD_REPORT=$M/peer.$v.json timeout 120 $M/peer_late_write 24 2> $M/peer.$v.err | tail -1)
    echo "| peer late write, $v | \`${line:-no output: $(tail -1 $M/peer.$v.err)}\` |"
  done
} > "$OUT/multi_gpu.md"
cat "$OUT/multi_gpu.md"
(cd $M && tar czf "$OUT/multi_gpu.tgz" .)
