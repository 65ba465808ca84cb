// Host side of a compiled model: the C ABI that libkiec_model.so exports. The generated model.cu defines the
// model's constants, then includes this file, then defines the mode's three hooks declared below (graph mode:
// a captured CUDA graph replayed per position; persistent mode: one cooperative launch per generation).
#pragma once
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <chrono>
#include <string>
#include <thread>

#include "common.cuh"

namespace kiec {

struct Ctx {
  int device = 0;
  cudaStream_t stream = nullptr;
  char* weights = nullptr;   // packed weights, layout of weights.bin
  float* arena = nullptr;    // activations and scratch (planned offsets)
  char* kv = nullptr;        // KV cache, [layers][2][kv_heads][max_seq][head_dim]
  unsigned int* counters = nullptr;
  StepState* st = nullptr;
  int* tokens = nullptr;     // device: prompt, then the generated tokens fed back
  int* host_tokens = nullptr;  // mapped pinned: the token produced at each position
  int* host_tokens_dev = nullptr;
  int* host_stop = nullptr;  // mapped pinned: set by kiec_stop, read by the persistent kernel
  int* host_stop_dev = nullptr;
  Generation gen;  // kiec_configure's; graph mode chooses greedily on the device and leaves EOS to the caller
  cudaGraphExec_t graph = nullptr;
  void* mode = nullptr;  // the mode's own device state
  double stall_s = 60.0;  // kiec_set_stall_timeout: the longest a step or a timed run may take before it counts as hung
  bool hung = false;  // finish: the work did not end when asked to stop (kiec_hung)
};

static thread_local std::string g_error;

static int fail(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g_error = buf;
  return -1;
}

#define KIEC_CHECK(call)                                                                          \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) return fail("%s failed: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
  } while (0)

// Waits until the work on c's stream up to event `e` (all of it: e null) has ended, at most `limit_s`: 0 once it
// has; -1 with the error set when it failed; 1 with the error set when it still runs at the deadline, after asking
// a persistent kernel to stop (host_stop) and waiting 5 s more for it (a kernel that waits for something that
// never comes: cudaStreamSynchronize would block the caller for good). `what` names the work in the error.
static int finish(Ctx* c, cudaEvent_t e, double limit_s, const char* what) {
  auto query = [&] { return e ? cudaEventQuery(e) : cudaStreamQuery(c->stream); };
  auto wait = [&](double s) {  // cudaSuccess, an error, or cudaErrorNotReady at the deadline
    using clock = std::chrono::steady_clock;
    const clock::time_point start = clock::now();
    const double capped = s < 1e7 ? s : 1e7;  // (nanoseconds in 64 bits: no overflow)
    const auto end = start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(capped));
    for (;;) {
      const cudaError_t r = query();
      const clock::time_point now = clock::now();
      if (r != cudaErrorNotReady || now >= end) return r;
      // polled without a pause for the first 10 ms (a step's latency is the host's too), then every 20 us
      if (now - start > std::chrono::milliseconds(10)) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  };
  cudaError_t r = wait(limit_s);
  if (r == cudaErrorNotReady) {
    *(volatile int*)c->host_stop = 1;
    r = wait(5.0);
    if (r == cudaSuccess) {
      fail("%s did not end within %.1f s (hung; asked to stop, it stopped)", what, limit_s);
      return 1;
    }
    if (r == cudaErrorNotReady) {
      c->hung = true;
      fail("%s did not end within %.1f s, nor 5 s after it was asked to stop: the GPU still runs it", what, limit_s);
      return 1;
    }
  }
  if (r != cudaSuccess) return fail("%s failed: %s", what, cudaGetErrorString(r));
  const cudaError_t last = cudaGetLastError();
  if (last != cudaSuccess) return fail("%s failed: %s", what, cudaGetErrorString(last));
  return 0;
}

// Milliseconds the work `enqueue` puts on c's stream takes, by CUDA events; -1 (and the error set) on a CUDA error
// or when it runs past the stall limit (finish).
template <typename F>
static float timed(Ctx* c, F enqueue) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, c->stream);
  enqueue();
  cudaEventRecord(b, c->stream);
  float ms = 0.f;
  const int rc = finish(c, b, c->stall_s, "the timed run");
  if (rc == 0) cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return rc ? -1.f : ms;
}

}  // namespace kiec

// The mode's hooks. setup: after the weights are loaded; run: enqueue the steps at positions [p0, p0 + n) on
// c->stream, tokens[p0] (and the prompt's) already in place, st->pos == p0; teardown: free what setup made.
static int mode_setup(kiec::Ctx* c);
static int mode_run(kiec::Ctx* c, int p0, int n, int n_prompt);
static void mode_teardown(kiec::Ctx* c);
static int n_launches();
static void run_launch(kiec::Ctx* c, int i, cudaStream_t s);

extern "C" {

const char* kiec_last_error() { return kiec::g_error.c_str(); }
int kiec_abi_version() { return 2; }
long long kiec_weight_bytes() { return KIEC_WEIGHT_BYTES; }
int kiec_max_seq_len() { return KIEC_MAX_SEQ; }
int kiec_vocab_size() { return KIEC_VOCAB; }

static int load_weights(kiec::Ctx* c, const char* path) {
  using namespace kiec;
  FILE* f = fopen(path, "rb");
  if (!f) return fail("%s: cannot open", path);
  fseek(f, 0, SEEK_END);
  long long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (size != KIEC_WEIGHT_BYTES) {
    fclose(f);
    return fail("%s: %lld bytes, this artifact's code expects %lld", path, size, (long long)KIEC_WEIGHT_BYTES);
  }
  const size_t chunk = 64ull << 20;
  void* staging = nullptr;
  if (cudaMallocHost(&staging, chunk) != cudaSuccess) { fclose(f); return fail("cannot allocate pinned staging memory"); }
  for (long long off = 0; off < size; off += chunk) {
    size_t n = (size_t)((size - off) < (long long)chunk ? (size - off) : chunk);
    if (fread(staging, 1, n, f) != n) { fclose(f); cudaFreeHost(staging); return fail("%s: short read at %lld", path, off); }
    cudaError_t e = cudaMemcpy(c->weights + off, staging, n, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) { fclose(f); cudaFreeHost(staging); return fail("copying weights: %s", cudaGetErrorString(e)); }
  }
  fclose(f);
  cudaFreeHost(staging);
  return 0;
}

static int check_device(int device) {
  using namespace kiec;
  int n = 0;
  KIEC_CHECK(cudaGetDeviceCount(&n));
  if (device < 0 || device >= n) return fail("device %d does not exist (%d GPUs)", device, n);
  cudaDeviceProp p;
  KIEC_CHECK(cudaGetDeviceProperties(&p, device));
  if (p.major * 10 + p.minor != KIEC_ARCH)
    return fail("GPU %d (%s) is sm_%d%d; this artifact was built for sm_%d", device, p.name, p.major, p.minor, KIEC_ARCH);
  KIEC_CHECK(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  KIEC_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const unsigned long long need = KIEC_WEIGHT_BYTES + KIEC_KV_BYTES + KIEC_ARENA_FLOATS * 4ull + (64ull << 20);
  if (need > free_b)
    return fail("GPU %d: the model needs %llu bytes, %zu are free", device, need, free_b);
  return 0;
}

void kiec_destroy(void* h);

void* kiec_create(const char* weights_path, int device) {
  using namespace kiec;
  if (check_device(device)) return nullptr;
  Ctx* c = new Ctx();
  c->device = device;
  auto bad = [&](int rc) { if (rc) { std::string e = g_error; kiec_destroy(c); g_error = e; } return rc; };
#define TRY(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { fail("%s: %s", #call, cudaGetErrorString(e_)); bad(-1); return nullptr; } } while (0)
  TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  TRY(cudaMalloc(&c->weights, KIEC_WEIGHT_BYTES));
  TRY(cudaMalloc(&c->arena, KIEC_ARENA_FLOATS * sizeof(float)));
  TRY(cudaMalloc(&c->kv, KIEC_KV_BYTES));
  TRY(cudaMalloc(&c->counters, 1024 * sizeof(unsigned int)));
  // every memset on c->stream, which is non-blocking: the legacy stream's work is not ordered before its kernels, so
  // a memset there may land after them (the likely cause of a trace recording found empty under ten test processes
  // sharing the GPU: persistent.cu.j2's kiec_trace)
  TRY(cudaMemsetAsync(c->counters, 0, 1024 * sizeof(unsigned int), c->stream));
  TRY(cudaMalloc(&c->st, sizeof(StepState)));
  TRY(cudaMalloc(&c->tokens, (KIEC_MAX_SEQ + 1) * sizeof(int)));
  TRY(cudaHostAlloc(&c->host_tokens, (KIEC_MAX_SEQ + 1) * sizeof(int), cudaHostAllocMapped));
  TRY(cudaHostGetDevicePointer(&c->host_tokens_dev, c->host_tokens, 0));
  TRY(cudaHostAlloc(&c->host_stop, sizeof(int), cudaHostAllocMapped));
  TRY(cudaHostGetDevicePointer(&c->host_stop_dev, c->host_stop, 0));
  *c->host_stop = 0;
  if (bad(load_weights(c, weights_path))) return nullptr;
  // Poison: NaN activations and KV cache, so that a read of anything not yet written shows.
  TRY(cudaMemsetAsync(c->arena, 0xff, KIEC_ARENA_FLOATS * sizeof(float), c->stream));
  TRY(cudaMemsetAsync(c->kv, 0xff, KIEC_KV_BYTES, c->stream));
  // The step state and the token list start at position 0 with token 0 (n_prompt 0: each step feeds its token back),
  // so that kernels launched before any step (kiec_time_launches on a new engine) read a valid position, not what a
  // freed allocation left there (test_time_launches_covers_every_kernel: an illegal address under ten test processes)
  TRY(cudaMemsetAsync(c->st, 0, sizeof(StepState), c->stream));
  TRY(cudaMemsetAsync(c->tokens, 0, (KIEC_MAX_SEQ + 1) * sizeof(int), c->stream));
  TRY(cudaStreamSynchronize(c->stream));  // (done before graph mode's capture on the stream, and their errors here)
  if (bad(mode_setup(c))) return nullptr;
#undef TRY
  return c;
}

void kiec_destroy(void* h) {
  kiec::Ctx* c = static_cast<kiec::Ctx*>(h);
  if (!c) return;
  mode_teardown(c);
  cudaFree(c->weights); cudaFree(c->arena); cudaFree(c->kv); cudaFree(c->counters); cudaFree(c->st);
  cudaFree(c->tokens);
  if (c->host_tokens) cudaFreeHost(c->host_tokens);
  if (c->host_stop) cudaFreeHost(c->host_stop);
  if (c->stream) cudaStreamDestroy(c->stream);
  delete c;
}

// How the next generations choose tokens and end: temperature 0 is greedy; otherwise top-p sampling with the
// seed (kiec/sampling.py); a generation ends after any of eos[0 .. n_eos). Persistent mode does all of it on the
// device; graph mode is greedy only (kiec.Engine samples on the host) and leaves EOS to the caller.
int kiec_configure(void* h, float temperature, float top_p, unsigned long long seed, const int* eos, int n_eos) {
  using namespace kiec;
  Ctx* c = static_cast<Ctx*>(h);
  if (!(temperature >= 0.f) || temperature > 1e30f) return fail("temperature %g must be a finite number >= 0", temperature);
  if (!(top_p > 0.f && top_p <= 1.f)) return fail("top_p %g must be in (0, 1]", top_p);
  if (n_eos < 0 || n_eos > MAX_EOS) return fail("%d EOS ids: at most %d", n_eos, MAX_EOS);
  if (temperature > 0.f && !KIEC_DEVICE_SAMPLING)
    return fail("this graph-mode artifact chooses tokens greedily on the device; sample on the host from kiec_step's "
                "logits (kiec.Engine does), or compile with --mode persistent");
  for (int i = 0; i < n_eos; ++i)
    if (eos[i] < 0 || eos[i] >= KIEC_VOCAB) return fail("EOS id %d is out of range [0, %d)", eos[i], KIEC_VOCAB);
  c->gen = Generation{temperature, top_p, seed, n_eos, {}};
  for (int i = 0; i < n_eos; ++i) c->gen.eos[i] = eos[i];
  return 0;
}

// Ask the running generation to end after the token it is on (persistent mode; graph mode runs its queue out).
void kiec_stop(void* h) { *(volatile int*)static_cast<kiec::Ctx*>(h)->host_stop = 1; }

// Start a generation of max_new tokens after the prompt; returns at once. The token made at position p appears
// in kiec_host_tokens(h)[p] (initialized to -1) as soon as its step ends; -2 after the last one when the
// generation ended early (EOS or kiec_stop).
int kiec_launch(void* h, const int* prompt, int n_prompt, int max_new) {
  using namespace kiec;
  Ctx* c = static_cast<Ctx*>(h);
  if (n_prompt < 1) return fail("the prompt is empty");
  if (max_new < 1) return fail("max_new_tokens must be at least 1");
  if (n_prompt + max_new > KIEC_MAX_SEQ)
    return fail("prompt (%d) + max_new_tokens (%d) exceeds max_seq_len %d", n_prompt, max_new, KIEC_MAX_SEQ);
  for (int i = 0; i < n_prompt; ++i)
    if (prompt[i] < 0 || prompt[i] >= KIEC_VOCAB) return fail("prompt token %d at index %d is out of range [0, %d)", prompt[i], i, KIEC_VOCAB);
  KIEC_CHECK(cudaStreamSynchronize(c->stream));
  for (int i = 0; i <= KIEC_MAX_SEQ; ++i) c->host_tokens[i] = -1;
  StepState s = {0, n_prompt, n_prompt + max_new - 1, 0, 0ull};
  KIEC_CHECK(cudaMemcpyAsync(c->tokens, prompt, n_prompt * sizeof(int), cudaMemcpyHostToDevice, c->stream));
  KIEC_CHECK(cudaMemcpyAsync(c->st, &s, sizeof s, cudaMemcpyHostToDevice, c->stream));
  return mode_run(c, 0, n_prompt + max_new - 1, n_prompt);
}

volatile int* kiec_host_tokens(void* h) { return static_cast<kiec::Ctx*>(h)->host_tokens; }

int kiec_sync(void* h) {
  using namespace kiec;
  KIEC_CHECK(cudaStreamSynchronize(static_cast<kiec::Ctx*>(h)->stream));
  KIEC_CHECK(cudaGetLastError());
  return 0;
}

// kiec_sync with a deadline of timeout_s: 0 once the generation's work has ended; -1 (the error set) when it failed;
// 1 (the error set) when it did not end in time: then it was asked to stop, and may still run (finish).
int kiec_wait(void* h, double timeout_s) {
  return kiec::finish(static_cast<kiec::Ctx*>(h), nullptr, timeout_s, "the generation");
}

// 1 once a call found the work still running 5 s after it asked it to stop (finish): the context's memory is in
// use by a kernel that may never end, so it must not be freed (kiec.Engine stops using it).
int kiec_hung(void* h) { return static_cast<kiec::Ctx*>(h)->hung ? 1 : 0; }

// The longest a step or a timed run may take (kiec_step, kiec_time_steps, kiec_time_launches) before it counts as
// hung: then a persistent kernel is asked to stop and the call fails (finish).
int kiec_set_stall_timeout(void* h, double seconds) {
  if (!(seconds > 0.0)) return kiec::fail("stall timeout %g s must be > 0", seconds);
  static_cast<kiec::Ctx*>(h)->stall_s = seconds;
  return 0;
}

// One step at (token, pos) on the current cache; copies the logits out. For tests and Engine.step.
int kiec_step(void* h, int token, int pos, float* logits) {
  using namespace kiec;
  Ctx* c = static_cast<Ctx*>(h);
  if (token < 0 || token >= KIEC_VOCAB) return fail("token id %d is out of range [0, %d)", token, KIEC_VOCAB);
  if (pos < 0 || pos >= KIEC_MAX_SEQ) return fail("position %d is past max_seq_len %d", pos, KIEC_MAX_SEQ);
  StepState s = {pos, pos + 1, pos + 1, 0, 0ull};
  KIEC_CHECK(cudaMemcpyAsync(c->tokens + pos, &token, sizeof(int), cudaMemcpyHostToDevice, c->stream));
  KIEC_CHECK(cudaMemcpyAsync(c->st, &s, sizeof s, cudaMemcpyHostToDevice, c->stream));
  if (mode_run(c, pos, 1, pos + 1)) return -1;
  // the deadline first: a copy into pageable memory would block the caller until the step ended, however long
  if (finish(c, nullptr, c->stall_s, "the step")) return -1;
  if (logits)
    KIEC_CHECK(cudaMemcpy(logits, c->arena + KIEC_LOGITS_OFFSET, KIEC_VOCAB * sizeof(float), cudaMemcpyDeviceToHost));
  return 0;
}

// Time `steps` decode steps (after `warmup`), positions continuing from `pos`; ms per step. Each step feeds its
// token to the next (no prompt).
float kiec_time_steps(void* h, int pos, int warmup, int steps) {
  using namespace kiec;
  Ctx* c = static_cast<Ctx*>(h);
  if (pos + warmup + steps > KIEC_MAX_SEQ) { fail("timing past max_seq_len"); return -1.f; }
  StepState s = {pos, 0, 0, 0, 0ull};
  const int token = 0;  // the first step's input; later ones feed back
  cudaMemcpyAsync(c->tokens + pos, &token, sizeof token, cudaMemcpyHostToDevice, c->stream);
  cudaMemcpyAsync(c->st, &s, sizeof s, cudaMemcpyHostToDevice, c->stream);
  if (warmup && mode_run(c, pos, warmup, 0)) return -1.f;
  s.pos = pos + warmup;
  cudaMemcpyAsync(c->st, &s, sizeof s, cudaMemcpyHostToDevice, c->stream);
  int rc = 0;
  const float ms = timed(c, [&] { rc = mode_run(c, pos + warmup, steps, 0); });
  return rc ? -1.f : ms < 0 ? ms : ms / steps;
}

// Milliseconds per pass of the launches idx[0..n) run back to back (no graph), `reps` passes after one
// warm-up, at the current position. Launching every layer's copy of one kernel keeps its weights out of L2
// between repeats, so bytes / time is the kernel's streaming rate.
float kiec_time_launches(void* h, const int* idx, int n, int reps) {
  using namespace kiec;
  Ctx* c = static_cast<Ctx*>(h);
  for (int i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= n_launches()) { fail("launch %d does not exist (%d launches)", idx[i], n_launches()); return -1.f; }
  for (int i = 0; i < n; ++i) run_launch(c, idx[i], c->stream);
  const float ms = timed(c, [&] {
    for (int r = 0; r < reps; ++r)
      for (int i = 0; i < n; ++i) run_launch(c, idx[i], c->stream);
  });
  return ms < 0 ? ms : ms / reps;
}

}  // extern "C"
