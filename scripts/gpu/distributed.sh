#!/usr/bin/env bash
# Issue 12 on the real GPU: torchrun with two gloo ranks on GPU 0 (plain, `cuguard run -- torchrun`,
# `torchrun -m cuguard run`), what frameworks see under CUGUARD_LIMIT, and dask-cuda's
# LocalCUDACluster made part of the run by cuguard.dask.register. Judged by distributed_check.py.
#
# Run from the repository root on the GPU machine after scripts/gpu/stage.sh (.gpu/) and with the
# Dask wheels in .whl/ (see docs/compatibility.md): bash scripts/gpu/distributed.sh [torch] [limit] [dask] [daskcli]
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
D=/tmp/cuguard-distributed
rm -rf "$D"; mkdir -p "$D"
S=$PWD/.gpu/libcuguard.so
what=${*:-torch limit dask}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PATH=$PWD/.gpu:$PATH
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/dask_cuda ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD/src/python:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -c 'import torch, dask, distributed, dask_cuda, rmm; print("torch", torch.__version__, "dask", dask.__version__, "distributed", distributed.__version__, "dask_cuda", dask_cuda.__version__, "rmm", rmm.__version__)' > $D/versions.txt 2>&1
cat $D/versions.txt

run_torch() {
  local port=$1; shift
  timeout 300 "$@" 2>&1
}

if [[ " $what " == *" torch "* ]]; then
  T=$D/torch
  mkdir -p $T/plain $T/outer $T/inner $T/outer-pool0
  run_torch 29511 python3 -m torch.distributed.run --nproc_per_node=2 --master_port=29511 scripts/gpu/ddp_train.py $T/plain > $T/plain.log
  echo $? > $T/plain.rc
  run_torch 29512 cuguard run --quiet --report "$T/outer/cuguard.%e.rank%r.%p.json" -- \
    python3 -m torch.distributed.run --nproc_per_node=2 --master_port=29512 scripts/gpu/ddp_train.py $T/outer > $T/outer.log
  echo $? > $T/outer.rc
  CUGUARD_POOL=0 run_torch 29513 cuguard run --quiet --report "$T/outer-pool0/cuguard.%e.rank%r.%p.json" -- \
    python3 -m torch.distributed.run --nproc_per_node=2 --master_port=29513 scripts/gpu/ddp_train.py $T/outer-pool0 > $T/outer-pool0.log
  echo $? > $T/outer-pool0.rc
  run_torch 29514 python3 -m torch.distributed.run --nproc_per_node=2 --master_port=29514 -m cuguard run --quiet \
    --report "$T/inner/cuguard.%e.rank%r.%p.json" -- python3 scripts/gpu/ddp_train.py $T/inner > $T/inner.log
  echo $? > $T/inner.rc
  for v in outer outer-pool0 inner; do
    ls $T/$v > $T/$v.files 2>&1
    cuguard merge --by rank -o $T/$v.merged.json $T/$v/cuguard.*.json > $T/$v.merge.log 2>&1
    cuguard summary --by rank $T/$v.merged.json > $T/$v.summary.txt 2>&1
    cuguard summary --by rank --format json $T/$v.merged.json > $T/$v.summary.json 2>&1
    cuguard check $T/$v.merged.json > $T/$v.check.txt 2>&1; echo $? > $T/$v.check.rc
  done
fi

if [[ " $what " == *" limit "* ]]; then
  L=$D/limit
  mkdir -p $L
  for c in torch rmm nvml; do
    CUGUARD_LIMIT=4GiB CUGUARD_REPORT=$L/$c.report.json LD_PRELOAD=$S timeout 120 python3 scripts/gpu/limit_check.py $c > $L/$c.out 2> $L/$c.err
    echo $? > $L/$c.rc
    CUGUARD_LIMIT=4GiB CUGUARD_LIMIT_VIRTUAL=0 CUGUARD_REPORT=$L/$c.novirt.report.json LD_PRELOAD=$S timeout 120 python3 scripts/gpu/limit_check.py $c > $L/$c.novirt.out 2> $L/$c.novirt.err
    echo $? > $L/$c.novirt.rc
  done
  timeout 120 python3 scripts/gpu/limit_check.py nvml > $L/nvml.bare.out 2> $L/nvml.bare.err
fi

if [[ " $what " == *" dask "* ]]; then
  K=$D/dask
  mkdir -p $K/reports
  for mode in dask_cuda rmm; do
    timeout 240 python3 scripts/gpu/dask_cuda_check.py 8GiB "$K/reports/cuguard.dask-worker.$mode.%h.%p.json" $mode > $K/$mode.out 2> $K/$mode.err
    echo $? > $K/$mode.rc
  done
  # The whole job under one limit: the client (where LocalCUDACluster reads NVML for its spill
  # threshold) too.
  CUGUARD_LIMIT=8GiB timeout 240 cuguard run --quiet --report "$K/reports/cuguard.whole.%e.%p.json" -- \
    python3 scripts/gpu/dask_cuda_check.py 8GiB "$K/reports/cuguard.dask-worker.whole.%h.%p.json" dask_cuda > $K/whole.out 2> $K/whole.err
  echo $? > $K/whole.rc
  ls -la $K/reports > $K/reports.txt
  cuguard merge --by worker -o $K/merged.json $K/reports/cuguard.dask-worker.*.json > $K/merge.log 2>&1
  cuguard summary --by worker $K/merged.json > $K/summary.txt 2>&1
fi

if [[ " $what " == *" daskcli "* ]]; then
  # `dask scheduler` and `dask cuda worker` started by hand, then registered from a client.
  C=$D/daskcli
  mkdir -p $C/reports
  (cd $C && timeout 200 python3 -m dask scheduler --scheduler-file $C/sched.json --no-dashboard > $C/scheduler.log 2>&1 &)
  for _ in $(seq 100); do [ -f $C/sched.json ] && break; sleep 0.2; done
  (cd $C && timeout 200 python3 -m dask cuda worker --scheduler-file $C/sched.json --rmm-pool-size 0.5 > $C/worker.log 2>&1 &)
  timeout 150 python3 scripts/gpu/dask_cuda_check.py 8GiB "$C/reports/cuguard.dask-cuda-worker.%h.%p.json" cli $C/sched.json > $C/cli.out 2> $C/cli.err
  echo $? > $C/cli.rc
  pkill -f "dask cuda worker"; pkill -f "dask scheduler"; sleep 2
fi

python3 scripts/gpu/distributed_check.py $D > "$OUT/distributed.md"
echo "distributed exit: $?"
(cd $D && tar czf "$OUT/distributed.tgz" .)
cat "$OUT/distributed.md"
