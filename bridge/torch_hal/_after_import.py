"""Runs a function once a module is imported, without importing it.

torch_hal must tell Dynamo about the device before Dynamo looks it up, but importing Dynamo at
``import torch`` would cost every eager user about a second. The finder below waits on
``sys.meta_path`` for the module, lets the import system load it as usual, and calls the
function with the module right after it executed; a module already imported is handed over at
once.
"""

import importlib.abc
import importlib.util
import sys
import warnings


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: the other finders find the module itself
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module
        callback = self.callback

        def exec_then_call(module):
            exec_module(module)
            _call(callback, module)

        spec.loader.exec_module = exec_then_call
        return spec


def _call(callback, module):
    try:
        callback(module)
    except Exception as exc:  # the importer's import must not fail because of torch_hal
        warnings.warn(f"torch_hal: setting up after the import of {module.__name__} failed: "
                      f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)


def after_import(name, callback):
    """Calls ``callback(module)`` once the module ``name`` is imported: now if it already is,
    else right after its first import executes it. A callback's exception becomes a
    RuntimeWarning (the import itself goes on). Not thread-safe against a concurrent first
    import of ``name``; call it at package import."""
    module = sys.modules.get(name)
    if module is not None:
        _call(callback, module)
        return
    sys.meta_path.insert(0, _AfterImport(name, callback))
