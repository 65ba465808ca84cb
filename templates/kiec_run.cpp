// kiec-run: the standalone runner of a compiled artifact (no Python).
//   kiec-run DIR 1,2,3 [max_new_tokens] [device]
// prints the generated ids, then the time to the first token and the decode rate. A token that takes longer than
// KIEC_STALL_TIMEOUT_S seconds (60; the first 0.05 s more per prompt token) counts as a hang: the generation is
// asked to stop and kiec-run fails naming the position (kiec.Engine's stream() does the same).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" {
void* kiec_create(const char* weights_path, int device);
void kiec_destroy(void*);
const char* kiec_last_error();
int kiec_launch(void*, const int*, int, int);
volatile int* kiec_host_tokens(void*);
int kiec_sync(void*);
void kiec_stop(void*);
int kiec_wait(void*, double);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s DIR PROMPT_IDS(comma-separated) [MAX_NEW_TOKENS] [DEVICE]\n", argv[0]);
    return 2;
  }
  std::vector<int> prompt;
  for (char* p = argv[2]; *p;) {
    char* end;
    long v = strtol(p, &end, 10);
    if (end == p) { fprintf(stderr, "kiec-run: bad prompt id list '%s'\n", argv[2]); return 2; }
    prompt.push_back((int)v);
    p = *end == ',' ? end + 1 : end;
  }
  const int max_new = argc > 3 ? atoi(argv[3]) : 32, device = argc > 4 ? atoi(argv[4]) : 0;
  std::string weights = std::string(argv[1]) + "/weights.bin";
  void* h = kiec_create(weights.c_str(), device);
  if (!h) { fprintf(stderr, "kiec-run: %s\n", kiec_last_error()); return 1; }
  auto t0 = std::chrono::steady_clock::now();
  if (kiec_launch(h, prompt.data(), (int)prompt.size(), max_new)) { fprintf(stderr, "kiec-run: %s\n", kiec_last_error()); return 1; }
  volatile int* out = kiec_host_tokens(h);
  const int first = (int)prompt.size() - 1, last = first + max_new - 1;
  double t_first = 0;
  const char* stall_env = getenv("KIEC_STALL_TIMEOUT_S");
  const double stall_s = stall_env ? atof(stall_env) : 60.0;
  double limit = stall_s + 0.05 * prompt.size();
  auto since = t0;
  for (int p = first; p <= last; ++p) {
    while (out[p] == -1) {
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count() > limit) {
        kiec_stop(h);
        const int rc = kiec_wait(h, 5.0);
        fprintf(stderr, "kiec-run: no token at position %d within %.3g s: the generation hung (%s)\n", p, limit,
                rc == 0 ? "asked to stop, it stopped" : kiec_last_error());
        if (rc == 0) kiec_destroy(h);  // (else the kernel still runs: freeing its memory would block)
        return 1;
      }
    }
    since = std::chrono::steady_clock::now();
    limit = stall_s;
    if (out[p] == -2) { printf("\n"); break; }  // the generation ended early (EOS)
    if (p == first) t_first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("%d%s", out[p], p == last ? "\n" : ",");
    fflush(stdout);
  }
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (kiec_sync(h)) { fprintf(stderr, "kiec-run: %s\n", kiec_last_error()); return 1; }
  fprintf(stderr, "time to first token %.2f ms (prompt %zu tokens); decode %.1f tok/s over %d tokens\n", t_first * 1e3,
          prompt.size(), max_new > 1 ? (max_new - 1) / (total - t_first) : 0.0, max_new);
  kiec_destroy(h);
  return 0;
}
