// kiec-run: the standalone runner of a compiled artifact (no Python).
//   kiec-run DIR 1,2,3 [max_new_tokens] [device]
// prints the generated ids, then the time to the first token and the decode rate.
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
  for (int p = first; p <= last; ++p) {
    while (out[p] == -1) {}
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
