"""The runtime's device work is ordered on the context's stream (c->stream, created non-blocking): the legacy
stream's work is not ordered before a non-blocking stream's, so a memset there may land after the kernels that
follow it (a trace recording was zeroed after its kernel wrote it, under ten test processes sharing one GPU)."""
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
