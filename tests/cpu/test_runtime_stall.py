"""kiec.Engine's stall guard without a GPU: a library whose kernel never writes a token (a hang), through the same
calls the runtime makes (ctypes functions replaced by Python ones)."""
import ctypes

import pytest

from kiec.errors import KiecError
from kiec.runtime import Engine


class HungLib:
    """libkiec_model.so's calls stream() makes, for a kernel that never produces a token; `stops`: whether it ends
    when asked to (kiec_stop)."""

    def __init__(self, stops: bool):
        self.stops, self.stopped, self.destroyed, self.error = stops, False, False, b""
        self.tokens = (ctypes.c_int * 64)(*([-1] * 64))

    def kiec_set_stall_timeout(self, h, s):
        return 0

    def kiec_launch(self, h, arr, n, max_new):
        return 0

    def kiec_host_tokens(self, h):
        return self.tokens

    def kiec_stop(self, h):
        self.stopped = True

    def kiec_wait(self, h, timeout_s):
        if self.stopped and self.stops:
            return 0
        self.error = b"the generation did not end within 5.0 s, nor 5 s after it was asked to stop: the GPU still runs it"
        return 1

    def kiec_hung(self, h):
        return int(self.stopped and not self.stops)

    def kiec_last_error(self):
        return self.error

    def kiec_destroy(self, h):
        self.destroyed = True


def engine(lib: HungLib, stall_s: float) -> Engine:
    eng = Engine.__new__(Engine)  # (no artifact: the library is the fake)
    eng._lib, eng._h, eng.mode, eng.manifest, eng._hung = lib, 1, "graph", {}, None
    eng.stall_timeout_s, eng.max_seq_len = stall_s, 63  # (host_tokens holds max_seq_len + 1)
    eng.PROMPT_ALLOWANCE_S = 0.01
    return eng


def test_a_generation_with_no_token_is_stopped_and_names_the_position():
    lib = HungLib(stops=True)
    eng = engine(lib, 0.05)
    with pytest.raises(KiecError, match=r"no token at position 2 within 0\.08 s: the generation hung \(asked to stop, "
                                        r"it stopped\)"):
        eng.generate([5, 6, 7], 4)  # 0.05 s and 3 prompt tokens x 0.01
    assert lib.stopped and eng._hung is None
    lib.tokens[2], lib.stopped = 9, False  # the next generation: one token, then the hang again
    with pytest.raises(KiecError, match=r"no token at position 3 within 0\.05 s"):
        eng.generate([5, 6, 7], 4)
    eng.close()
    assert lib.destroyed


def test_a_kernel_that_does_not_stop_leaves_the_engine_refusing_work():
    lib = HungLib(stops=False)
    eng = engine(lib, 0.05)
    with pytest.raises(KiecError, match=r"no token at position 0 within .* the GPU still runs it"):
        eng.generate([5], 2)
    with pytest.raises(KiecError, match=r"this Engine's kernel did not stop .*a new process"):
        eng.generate([5], 2)
    with pytest.raises(KiecError, match=r"did not stop"):
        eng.step(5, 0)
    eng.close()
    assert not lib.destroyed  # freeing memory a running kernel uses would block for good
