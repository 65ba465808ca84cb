"""Where a kernel's warps stall, instruction by instruction: ncu's source page of a report exported as CSV
(scripts/gpu_run.sh PROFILE_SOURCE=1 writes ncu_MODEL_source.csv; bench/results keeps them gzipped):
    python3 scripts/ncu_source.py FILE[.gz]                  # top instructions, hot windows, the ring's share
    python3 scripts/ncu_source.py FILE[.gz] --range A B      # instructions A..B of the listing, one a line
    python3 scripts/ncu_source.py FILE[.gz] --segments       # the listing cut at barriers, signals and jump tables
    python3 scripts/ncu_source.py FILE[.gz] --banks          # shared-memory accesses with excess wavefronts
Each instruction's sampled warps (all of the kernel's warps: compute, streaming, idle) and its top stall reasons;
windows of --window (48) instructions by samples; and the persistent kernel's landmarks: the samples on the
compute warps' shared-memory barrier waits (SYNCS.PHASECHK ... TRYWAIT and the branch after it: waiting for a ring
page), on the instruction after a block barrier (BAR.SYNC: a tile's threads waiting while thread 0 polls its
inputs, or for the block's slowest warp), and in the streaming thread's page loop (page_loop), its waits for a free
page among them. --banks: the shared-memory accesses that took more wavefronts than their ideal (bank conflicts),
most first, with each one's share of all the excess (the seventieth session found smollm2-135m's x-slice loads there,
bench/RESULTS.md)."""
import csv
import gzip
import sys
from collections import Counter


# shared-memory wavefronts an instruction took, and those past its ideal (ncu's SourceCounters)
WAVEFRONTS, EXCESS = "L1 Wavefronts Shared", "L1 Wavefronts Shared Excessive"


def load(path: str) -> tuple[list[str], list[dict]]:
    """The stall columns (stall_*, all samples) and one dict a SASS instruction of the first profiled launch (an
    export of several holds a table each): index, source, samples, executed, and each stall column's count."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        rows = list(csv.reader(fh))
    hdr = next(r for r in rows if r and r[0] == "Address")
    start = rows.index(hdr) + 1
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    def num(r: list[str], h: str) -> int:
        v = r[ix[h]].replace(",", "")
        return int(float(v)) if v not in ("", "-") else 0

    def opt(r: list[str], h: str) -> int:  # (a column some exports lack: 0)
        return num(r, h) if h in ix else 0

    out = []
    for r in rows[start:]:
        if r and r[0] in ("Kernel Name", "Address"):  # the next profiled launch's table: the first launch's alone
            break
        if len(r) < len(hdr):
            continue
        out.append(dict(index=len(out), source=r[ix["Source"]].strip(), samples=num(r, "# Samples"),
                        executed=num(r, "Instructions Executed"), **{h: num(r, h) for h in stalls},
                        shared_wavefronts=opt(r, WAVEFRONTS), shared_excess=opt(r, EXCESS)))
    return stalls, out


def bank_conflicts(ins: list[dict]) -> tuple[int, int, list[dict]]:
    """(all shared wavefronts, all excess ones, the instructions with excess, most first)."""
    hit = sorted((i for i in ins if i["shared_excess"] > 0), key=lambda i: -i["shared_excess"])
    return sum(i["shared_wavefronts"] for i in ins), sum(i["shared_excess"] for i in ins), hit


def top_stalls(ins: list[dict], stalls: list[str], n: int = 2) -> str:
    c = Counter({h[6:]: sum(i[h] for i in ins) for h in stalls})
    return " ".join(f"{k}:{v}" for k, v in c.most_common(n) if v)


def opcode(src: str) -> str:
    words = src.split()
    return (words[1] if words and words[0].startswith("@") else words[0]) if words else ""


def page_loop(ins: list[dict]) -> range:
    """The streaming thread's page loop: the instructions around its most executed bulk copy (UBLKCP) executed at
    least 0.4 times as often, with gaps of up to 16 that run less (its rarer branches); empty without copies."""
    copies = [i for i in ins if opcode(i["source"]).startswith("UBLKCP")]
    if not copies:
        return range(0)
    top = max(copies, key=lambda c: c["executed"])
    floor, at = 0.4 * top["executed"], top["index"]

    def reach(step: int) -> int:
        k, gap, last = at, 0, at
        while 0 <= k + step < len(ins) and gap <= 16:
            k += step
            if ins[k]["executed"] >= floor:
                last, gap = k, 0
            else:
                gap += 1
        return last

    return range(reach(-1), reach(1) + 1)


def is_ring_wait(ins: list[dict], k: int) -> bool:
    """A shared-memory barrier's try-wait (SYNCS.PHASECHK ... TRYWAIT) or the branch that loops back to it."""
    def wait(j: int) -> bool:
        return 0 <= j < len(ins) and "SYNCS.PHASECHK" in ins[j]["source"] and "TRYWAIT" in ins[j]["source"]
    return wait(k) or wait(k - 1)


def landmarks(ins: list[dict]) -> dict[str, int]:
    """Samples on the compute warps' ring waits (try-waits outside the streaming thread's loop), after block
    barriers, in the streaming thread's page loop and, of those, on its waits for a free page."""
    loop = page_loop(ins)
    ring = sum(i["samples"] for k, i in enumerate(ins) if k not in loop and is_ring_wait(ins, k))
    after_bar = sum(ins[k + 1]["samples"] for k, i in enumerate(ins[:-1]) if opcode(i["source"]).startswith("BAR.SYNC"))
    spin = sum(ins[k]["samples"] for k in loop if is_ring_wait(ins, k))
    return {"compute warps' ring waits": ring, "after a block barrier": after_bar,
            "streaming thread's page loop": sum(ins[k]["samples"] for k in loop),
            "  of it, waits for a free page": spin}


# segments' cuts: a block barrier, a signal (a reduction or atomic to global memory) or a jump table
CUTS = ("BAR.SYNC", "REDG", "RED.", "ATOMG", "BRX")


def segments(ins: list[dict], stalls: list[str], at_least: float = 0.5,
             also: tuple[int, ...] = ()) -> list[tuple[int, int, float, int, str]]:
    """The listing cut before each of CUTS' instructions (and at the indices in `also`): the segments holding at least
    `at_least` % of the samples, each as (first index, end index, % of samples, most executed, top stall). In the
    persistent kernel a dispatch case runs from its jump to its signal; within it the block barriers part the wait,
    the prologue, the dots and the epilogue, and an instruction's executed count (tiles x tokens x warps) tells the
    cases apart."""
    total = sum(i["samples"] for i in ins) or 1
    cuts = sorted({0, len(ins), *(k for k in also if 0 < k < len(ins)),
                   *(k for k in range(1, len(ins)) if opcode(ins[k]["source"]).startswith(CUTS))})
    out = []
    for a, b in zip(cuts, cuts[1:]):
        share = 100 * sum(i["samples"] for i in ins[a:b]) / total
        if share >= at_least:
            out.append((a, b, share, max(i["executed"] for i in ins[a:b]), top_stalls(ins[a:b], stalls, 1)))
    return out


def main(argv: list[str]) -> None:
    path = argv[0]
    stalls, ins = load(path)
    total = sum(i["samples"] for i in ins)
    if "--range" in argv:
        a, b = (int(v) for v in argv[argv.index("--range") + 1:][:2])
        for i in ins[a:b]:
            print(f"{i['index']:6d} {i['samples']:8d} {i['executed']:>11} {i['source'][:64]:64s} "
                  f"{top_stalls([i], stalls, 3)}")
        return
    if "--segments" in argv:
        print("segments between block barriers, signals and jump tables, of 0.5% of the samples or more (first, end, "
              "% of samples, most executed, top stall, first instruction):")
        for a, b, share, most, top in segments(ins, stalls):
            print(f"{a:6d} {b:6d} {share:5.1f}% {most:>11} {top:24s} {ins[a]['source'][:48]}")
        return
    if "--banks" in argv:
        waves, excess, hit = bank_conflicts(ins)
        print(f"shared-memory wavefronts {waves}, past their ideal {excess} ({100 * excess / max(waves, 1):.1f}%); "
              "the accesses with excess (index, % of the excess, wavefronts over ideal, executed, source):")
        for i in hit[:25]:
            ideal = i["shared_wavefronts"] - i["shared_excess"]
            share, ratio = 100 * i["shared_excess"] / excess, i["shared_wavefronts"] / max(ideal, 1)
            print(f"{i['index']:6d} {share:5.1f}% {ratio:5.2f}x {i['executed']:>11} {i['source'][:64]}")
        return
    w = int(argv[argv.index("--window") + 1]) if "--window" in argv else 48
    print(f"{len(ins)} instructions, {total} samples")
    print("\ntop instructions (index, % of samples, executed, source, top stalls):")
    for i in sorted(ins, key=lambda i: -i["samples"])[:25]:
        print(f"{i['index']:6d} {100 * i['samples'] / total:5.2f}% {i['executed']:>11} {i['source'][:56]:56s} "
              f"{top_stalls([i], stalls)}")
    print(f"\nhot windows of {w} instructions (first index, % of samples, most executed, top stalls):")
    wins = [ins[k:k + w] for k in range(0, len(ins), w)]
    for seg in sorted(wins, key=lambda s: -sum(i["samples"] for i in s))[:15]:
        s = sum(i["samples"] for i in seg)
        print(f"{seg[0]['index']:6d} {100 * s / total:5.1f}% {max(i['executed'] for i in seg):>11} "
              f"{top_stalls(seg, stalls, 3)}")
    print("\nlandmarks (% of samples):")
    for name, v in landmarks(ins).items():
        print(f"  {name:<32}{100 * v / total:5.1f}%")


if __name__ == "__main__":
    main(sys.argv[1:])
