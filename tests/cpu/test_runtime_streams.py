"""The runtime's device work is ordered on the context's stream (c->stream, created non-blocking): the legacy
stream's work is not ordered before a non-blocking stream's, so a memset there may land after the kernels that
follow it (the likely cause of a trace recording found zeroed under ten test processes sharing one GPU)."""
import os
import re

TEMPLATES = os.path.join(os.path.dirname(__file__), "..", "..", "templates")


def sources_on_the_context_stream() -> dict[str, str]:
    """The templates (kernels' hosts, the runtime) that put work on c->stream, by path."""
    out = {}
    for root, _, files in os.walk(TEMPLATES):
        for name in files:
            with open(os.path.join(root, name)) as fh:
                text = fh.read()
            if "c->stream" in text:
                out[os.path.relpath(os.path.join(root, name), TEMPLATES)] = text
    return out


def test_no_memset_on_the_legacy_stream_beside_the_context_stream():
    found = sources_on_the_context_stream()
    assert "include/kiec/runtime.cuh" in found and "persistent.cu.j2" in found
    legacy = {path: re.findall(r"cudaMemset\(", text) for path, text in found.items()}
    assert all(not calls for calls in legacy.values()), legacy
    # the trace recording's zeroing and the creation's poison go on the stream
    assert "cudaMemsetAsync(ps->trace, 0, bytes, c->stream)" in found["persistent.cu.j2"]
    assert "cudaMemsetAsync(c->kv, 0xff, KIEC_KV_BYTES, c->stream)" in found["include/kiec/runtime.cuh"]


def test_creation_writes_every_device_allocation_before_the_first_kernel():
    """kiec_create fills each buffer it allocates on the device (weights loaded, the rest set on the stream): a
    kernel launched before any step (kiec_time_launches on a new engine) read a position left in a reused
    allocation and faulted."""
    text = sources_on_the_context_stream()["include/kiec/runtime.cuh"]
    create = text[text.index("void* kiec_create("):text.index("void kiec_destroy(void* h) {")]
    allocated = re.findall(r"cudaMalloc\(&c->(\w+)", create)
    assert {"weights", "arena", "kv", "counters", "st", "tokens"} <= set(allocated), allocated
    written = set(re.findall(r"cudaMemsetAsync\(c->(\w+), .*, c->stream\)", create))
    assert "load_weights(c, weights_path)" in create
    assert set(allocated) - {"weights"} <= written, set(allocated) - written
    # all of it before the mode's setup, which in graph mode captures the step on the stream
    assert create.index("cudaStreamSynchronize(c->stream)") < create.index("mode_setup(c)")
    assert max(create.index(f"cudaMemsetAsync(c->{name},") for name in written) < create.index(
        "cudaStreamSynchronize(c->stream)")
