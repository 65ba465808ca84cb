"""The one exception kiec raises for bad input: its message names what is wrong and where."""


class KiecError(Exception):
    pass
