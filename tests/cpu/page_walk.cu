// Host harness for tests/cpu/test_persistent_stream.py: runs the streaming thread's page walk (PageWalk in
// ring.cuh) over an instruction table and prints every page it would copy, one line each:
//   sm gate_offset up_offset(-1: none) bytes up_at   (offsets into the weights)
// then, for each attention instruction at each position, the cache rows of earlier steps it would ask L2 for:
//   kv sm pos instruction lo rows
// Usage: page_walk DIR P0 P_END PAGE_BYTES [KEPT]   (DIR holds instrs.bin, starts.bin, kernels.bin as the artifact
// packs them; KEPT 1: the walk that keeps a share's walk, persist_walk_kept)
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "persistent_abi.h"
#include "kiec/ring.cuh"

static std::vector<char> slurp(const char* dir, const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  std::vector<char> v;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
  fclose(f);
  return v;
}

template <int PAGE, bool KEPT>
static void walk(const kiec::PersistentArgs& a, int sms) {
  for (int sm = 0; sm < sms; ++sm) {
    kiec::PageWalk<PAGE, KEPT> w(&a, a.starts[sm], a.starts[sm + 1]);
    while (w.next())
      printf("%d %lld %lld %u %u\n", sm, (long long)(w.gate - a.weights),
             w.up ? (long long)(w.up - a.weights) : -1ll, w.bytes, w.up_at);
  }
}

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) { fprintf(stderr, "usage: %s DIR P0 P_END PAGE_BYTES [KEPT]\n", argv[0]); return 2; }
  const bool kept = argc == 6 && atoi(argv[5]) != 0;
  std::vector<char> instrs = slurp(argv[1], "instrs.bin"), starts = slurp(argv[1], "starts.bin"),
                    kernels = slurp(argv[1], "kernels.bin");
  static char base[16];  // the weights' base: only offsets from it are printed
  kiec::PersistentArgs a = {};
  a.instrs = reinterpret_cast<const kiec::Instr*>(instrs.data());
  a.starts = reinterpret_cast<const int*>(starts.data());
  a.kernels = reinterpret_cast<const kiec::KernelDesc*>(kernels.data());
  a.weights = base;
  a.p0 = atoi(argv[2]);
  a.p_end = atoi(argv[3]);
  const int sms = (int)(starts.size() / sizeof(int)) - 1;
  switch (atoi(argv[4])) {
    case 1024: kept ? walk<1024, true>(a, sms) : walk<1024, false>(a, sms); break;
    case 16384: kept ? walk<16384, true>(a, sms) : walk<16384, false>(a, sms); break;
    default: fprintf(stderr, "page size %s: add it to the switch\n", argv[4]); return 2;
  }
  kiec::PageWalk<1024> w(&a, 0, 0);
  for (int sm = 0; sm < sms; ++sm)
    for (w.pos = a.p0; w.pos < a.p_end; ++w.pos)
      for (int i = a.starts[sm]; i < a.starts[sm + 1]; ++i)
        if (a.instrs[i].opcode == kiec::OP_ATTENTION) {
          int lo;
          const int rows = w.kv_rows(a.instrs[i], lo);
          printf("kv %d %d %d %d %d\n", sm, w.pos, i, rows > 0 ? lo : 0, rows);
        }
  return 0;
}
