"""The compile modes and the default one, in one place for the CLI, `kiec.compile` and `kiec bench`.

Graph mode stays the default until persistent mode is ahead of it on every model of issue #6's table, each timed by
`kiec bench` with both modes in one run (bench/RESULTS.md); then DEFAULT_MODE becomes "persistent"."""

MODES = ("graph", "persistent")
DEFAULT_MODE = "graph"
