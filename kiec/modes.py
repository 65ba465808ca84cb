"""The compile modes and the default one, in one place for the CLI, `kiec.compile` and `kiec bench`.

Persistent mode is the default since it came out ahead of graph mode on every model of issue #6's table, each timed
by `kiec bench` with both modes in one run (bench/RESULTS.md, 2026-12-02). `kiec.compile` without a mode falls back
to graph mode for a model persistent mode cannot build (kiec/build.py)."""

MODES = ("graph", "persistent")
DEFAULT_MODE = "persistent"
