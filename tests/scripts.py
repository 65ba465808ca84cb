"""scripts/*.py as modules for the CPU tests (the scripts are not a package)."""
import importlib.util
import os
import sys

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts")


def load_script(name: str):
    """scripts/<name>.py loaded as module `name`, registered in sys.modules (dataclasses look their module up there),
    with scripts/ on the path for the scripts that import one beside them."""
    if SCRIPTS not in sys.path:
        sys.path.insert(0, SCRIPTS)
    spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, f"{name}.py"))
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
