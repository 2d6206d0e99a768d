"""Search: proposers, the Optuna refiner, the result store, the search loop.

This package is also the public function: `cudal2.search(shape, ...)` runs a search (it is
cudal2.api.search; see its docstring). A package and a function cannot share the name
`cudal2.search` otherwise, because importing any submodule rebinds the attribute to the package.
"""

import sys
import types


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from ..api import search

        return search(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
