"""``h2dlab.__all__``: the names a notebook needs, each loaded on first use (issue 29)."""

import importlib

import pytest

import h2dlab
from tests.project.test_import_graph import GRAPH, LAYERS


def test_the_public_surface_is_small_and_listed():
    public = [n for n in h2dlab.__all__ if n not in ("SCHEMA_VERSION", "__version__")]
    assert 20 <= len(public) <= 30
    assert not set(public) & set(LAYERS)  # those names are the folders
    assert callable(h2dlab.doctor)  # the one folder that is also a name: h2dlab.doctor(trace)
    assert sorted(public) == sorted(h2dlab._PUBLIC)
    assert set(h2dlab.__all__) <= set(dir(h2dlab))


@pytest.mark.parametrize("name", sorted(h2dlab._PUBLIC))
def test_each_public_name_is_the_object_its_module_holds(name):
    module, _, attr = h2dlab._PUBLIC[name].partition(":")
    found = importlib.import_module(module)
    assert getattr(h2dlab, name) is (getattr(found, attr) if attr else found)
    if attr:  # each is documented where it lives
        assert getattr(found, attr).__doc__
        assert attr in found.__all__


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        h2dlab.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        from h2dlab import no_such_name  # noqa: F401


def test_importing_the_package_imports_none_of_its_modules():
    """The package's own module holds no import of the kit (the names load on first use)."""
    assert GRAPH["h2dlab"] == set()
