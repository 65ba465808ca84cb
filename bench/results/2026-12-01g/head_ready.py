# Twentieth session, CPU only: in the nineteenth session's smollm2-135m trace at position 40 (call5_traces.tar), how
# much sooner each KV head's q, k and v rows were all written than the QKV phase's last tile: what attention would gain
# waiting on its own head's QKV tiles instead of the whole phase. The trace's schedule lacks the tiles' rows, so the
# emitter's schedule is made again as kiec compile makes it (the same lists: asserted). Run from the repository root
# after `tar -xf bench/results/2026-12-01g/call5_traces.tar -C /tmp/tr`: python3 bench/results/2026-12-01g/head_ready.py
import sys, numpy as np, collections
sys.path.insert(0, 'scripts')
import trace_summary as T
import kiec
from kiec.codegen import persistent as P
from kiec.codegen.targets import target
from kiec.ir.passes import pipeline
m = kiec.load("smollm2-135m", dtype="bf16")
prog = pipeline.run(m.graph)
em = P._PersistentEmitter(prog, "bf16", m.max_seq_len, target("sm_90"))
flat = [(sm, ins) for sm, lst in enumerate(em.sched.lists) for ins in lst]
ts, man, pos = T.load('/tmp/tr/trace_smollm2-135m_40.npz')
sched = man['schedule']
assert len(sched) == len(flat), (len(sched), len(flat))
assert all(s[0] == f[0] and s[1] == f[1].opcode and s[2] == f[1].kernel for s, f in zip(sched, flat))
col = T.columns(ts, man['trace_slots'])
kernels = man['kernels']
# QKV kernels: name ends with qkv; rows: q (9*64=576), k (3*64), v (3*64)
H, KV, D = 9, 3, 64
G = H // KV
gains = []
byk = collections.defaultdict(list)
for i, (sm, ins) in enumerate(flat):
    if ins.opcode == 'gemv' and kernels[ins.kernel]['name'].endswith('qkv'):
        byk[ins.kernel].append((ins.lo, ins.hi, col['done'][i]))
def head_rows(g):  # KV head g's rows of the packed QKV output: its query heads' q, then its k, then its v
    return (set(range(g * G * D, (g + 1) * G * D)) | set(range(H * D + g * D, H * D + (g + 1) * D))
            | set(range(H * D + KV * D + g * D, H * D + KV * D + (g + 1) * D)))


for k, tiles in byk.items():
    last = max(d for *_, d in tiles)
    writers = [[d for lo, hi, d in tiles if head_rows(g) & set(range(lo, hi))] for g in range(KV)]
    gains += [(last - max(w)) / 1e3 for w in writers]
    ntile = [len(w) for w in writers]
g = np.array(gains)
print("tiles a head", ntile, "of", len(tiles))
print("us a head earlier than the phase's last tile: mean %.3f median %.3f min %.3f max %.3f" % (g.mean(), np.median(g), g.min(), g.max()))
g3 = g.reshape(-1, KV).min(axis=1)  # the phase ends with the last head's attention anyway: the head whose rows came last
print("per layer, the latest head's gain (what the chain could gain at most): mean %.3f" % g3.mean())
