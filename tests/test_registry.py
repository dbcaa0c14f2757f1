"""Registry.register / unregister: a replacement comes and goes, built-ins stay."""

from __future__ import annotations

import pytest

from packer.errors import UnknownNameError
from packer.registry import Lazy, Registry


def _registry() -> Registry[object]:
    return Registry("thing", {"json": "json:dumps", "extra": Lazy("json:loads", "needs")})


def test_unregistering_a_replacement_restores_the_built_in() -> None:
    things = _registry()
    import json

    mine = object()
    things.register("json", mine, replace=True)
    assert things.get("json") is mine and things.extra_of("extra") == "needs"
    things.unregister("json")
    assert "json" in things and things.get("json") is json.dumps
    assert things.names() == ("extra", "json")


def test_replacing_a_built_in_already_imported_and_unregistering_it_restores_it() -> None:
    things = _registry()
    import json

    assert things.get("extra") is json.loads
    things.register("extra", "mine", replace=True)
    assert things.get("extra") == "mine" and things.extra_of("extra") is None
    things.unregister("extra")
    assert things.get("extra") is json.loads and things.extra_of("extra") == "needs"


def test_unregistering_a_built_in_never_replaced_does_nothing() -> None:
    things = _registry()
    import json

    things.unregister("json")
    things.get("json")
    things.unregister("json")
    assert things.get("json") is json.dumps and "json" in things


def test_a_registered_name_goes_and_a_taken_name_needs_replace() -> None:
    things = _registry()
    things.register("plugin", 1)
    with pytest.raises(ValueError, match="replace=True"):
        things.register("plugin", 2)
    with pytest.raises(ValueError, match="replace=True"):
        things.register("json", 2)
    things.register("plugin", 3, replace=True)
    assert things.get("plugin") == 3
    things.unregister("plugin")
    assert "plugin" not in things
    with pytest.raises(UnknownNameError, match="Unknown thing 'plugin'; available: extra, json"):
        things.get("plugin")
    things.unregister("plugin")  # gone already: nothing to do
