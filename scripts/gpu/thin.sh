set -x
B=/tmp/b; mkdir -p $B; S=$PWD/.gpu/libcuguard.so
cd scripts/gpu
gcc -O1 -I/usr/local/cuda/include -o $B/doors doors.c -L/usr/local/nvidia/lib64 -lcuda -ldl || exit 1
/usr/local/cuda/bin/nvcc -g -o $B/planted planted_leaks.cu || exit 1
for m in linked dlsym getproc; do CUGUARD_REPORT=$OUT/doors-$m.json LD_PRELOAD=$S $B/doors $m; echo rc=$?; done
CUGUARD_REPORT=$OUT/planted.json LD_PRELOAD=$S $B/planted; echo rc=$?
/usr/local/cuda/bin/compute-sanitizer --leak-check full $B/planted > $OUT/cs.txt 2>&1; tail -5 $OUT/cs.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUGUARD_REPORT=$OUT/torch.json LD_PRELOAD=$S python3 -c "import torch; a=[torch.ones(1000,device='cuda') for _ in range(5)]; del a[0]; print('ok')"; echo rc=$?
python3 - <<'PY'
import json,glob,os
for f in sorted(glob.glob(os.environ['OUT']+'/*.json')):
    r=json.load(open(f))
    ls=r['leaks']
    print(os.path.basename(f), 'leaks',len(ls),'bytes',sum(l['size'] for l in ls), 'states',sorted(set(l['state'] for l in ls)), 'apis',sorted(set(l['api'] for l in ls)), 'doors',r['doors'], 'ctx',len(r['contexts']), 'events',[e['kind'] for e in r['events']][:5], 'stats', [(d['allocations'],d['frees']) for d in r['stats']['devices']])
PY
