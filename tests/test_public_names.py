"""No package attribute hides a submodule of the same name, in `constrained` and `agent` and their subpackages.

``from constrained.structured import generate`` in a package ``__init__`` binds the function over nothing; the same
line with a module named ``generate`` would bind it over the submodule, so ``import constrained.generate`` gave the
function and ``constrained.generate.GenerationError`` failed. Here every name that is both a package attribute and a
submodule must be that submodule.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

ROOTS = ("constrained", "agent")


def _packages() -> list[str]:
    names = list(ROOTS)
    for root in ROOTS:
        package = importlib.import_module(root)
        names += [info.name for info in pkgutil.walk_packages(package.__path__, f"{root}.") if info.ispkg]
    return names


@pytest.mark.parametrize("package_name", _packages())
def test_a_package_attribute_named_like_a_submodule_is_that_submodule(package_name: str) -> None:
    package = importlib.import_module(package_name)
    attributes = dict(vars(package))  # before importing the submodules: importing one would rebind its name
    exported = set(getattr(package, "__all__", ()))
    submodules = [info.name for info in pkgutil.iter_modules(package.__path__)]
    assert submodules
    for name in submodules:
        module = importlib.import_module(f"{package_name}.{name}")
        assert name not in exported, f"{package_name}.__all__ exports {name!r}, which is also a submodule"
        if name in attributes:
            assert attributes[name] is module, (
                f"{package_name}.{name} is {attributes[name]!r}, hiding the submodule {module.__name__}")


def test_the_functions_keep_their_names_and_their_modules_have_others() -> None:
    import constrained
    import constrained.decoding
    import constrained.structured

    assert constrained.generate is constrained.structured.generate and callable(constrained.generate)
    assert constrained.decode is constrained.decoding.decode and callable(constrained.decode)
    assert constrained.structured.GenerationError is constrained.GenerationError
