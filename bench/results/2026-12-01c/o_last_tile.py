# How bench/RESULTS.md (2026-12-01, fifteenth session) counted the output projections whose last tile ran on the SM
# of an attention split in use: python3 bench/results/2026-12-01c/o_last_tile.py call9_traces/FILE.npz (from the repo root)
import sys, collections, numpy as np
sys.path.insert(0, "scripts")
import trace_summary as T
ts, m, pos = T.load(sys.argv[1])
slots, sched, kernels = m["trace_slots"], m["schedule"], m["kernels"]
col = T.columns(ts, slots)
by_sm = collections.defaultdict(list)
for i, e in enumerate(sched):
    by_sm[e[0]].append(i)
busy, lag, n = 0, [], 0
for rows, opcode, k, prev_end in T.along_chain(col, sched):
    if prev_end is None or opcode != "gemv" or sched[by_sm[sched[rows[0]][0]][by_sm[sched[rows[0]][0]].index(rows[0]) - 1]][1] != "attention":
        continue
    done = col["done"][rows]
    j = rows[int(done.argmax())]
    lst = by_sm[sched[j][0]]
    prev = lst[lst.index(j) - 1]
    att = [r for r in range(len(sched)) if sched[r][1] == "attention" and sched[r][3] == sched[prev][3] and col["start"][r] > 0]
    med = np.median(col["done"][att] - col["ready"][att])
    n += 1
    if sched[prev][1] == "attention" and col["done"][prev] - col["ready"][prev] > 2 * med:
        busy += 1
        lag.append((done.max() - np.median(done)) / 1e3)
print(f"{busy} of {n} phases after attention: the last tile's SM ran a split in use; its tile ended "
      f"{min(lag):.2f}-{max(lag):.2f} us after the median")
