"""Every public name that attnkit.modules / attnkit.models list resolves to the object of its file."""

import importlib

import pytest

import attnkit.models
import attnkit.modules


@pytest.mark.parametrize("package", [attnkit.modules, attnkit.models], ids=lambda p: p.__name__)
def test_every_export_resolves_to_its_file(package):
    # import every file first: a submodule import must not shadow a public name of the same spelling
    for file in set(package._EXPORTS.values()):
        importlib.import_module(f"{package.__name__}.{file}")
    for name, file in package._EXPORTS.items():
        obj = getattr(package, name)
        assert obj is getattr(importlib.import_module(f"{package.__name__}.{file}"), name), name
    assert sorted(package.__all__) == sorted(package._EXPORTS)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        attnkit.modules.Nope
