// Host harness for tests/cpu/test_persistent_stream.py: instr_ahead (persistent_args.cuh), the staged instruction's
// place, against the division it replaces, for every list begin .. end of up to 8 instructions at 0 .. 3, every i in
// it and every distance 0 .. 9. Prints the cases checked and those that differ; exits 1 on any.
#include <cstdio>

#include "persistent_abi.h"
#include "kiec/persistent_args.cuh"

int main() {
  int cases = 0, wrong = 0;
  for (int begin = 0; begin < 4; ++begin)
    for (int n = 1; n <= 8; ++n)
      for (int i = begin; i < begin + n; ++i)
        for (int ahead = 0; ahead < 10; ++ahead, ++cases) {
          const int got = kiec::instr_ahead(begin, begin + n, i, ahead), want = begin + (i - begin + ahead) % n;
          if (got != want) {
            ++wrong;
            printf("begin %d end %d i %d ahead %d: %d, want %d\n", begin, begin + n, i, ahead, got, want);
          }
        }
  printf("%d cases, %d wrong\n", cases, wrong);
  return wrong ? 1 : 0;
}
