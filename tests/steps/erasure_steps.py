"""Steps for the purge and delete-tree features: the events of one call, in order."""

from __future__ import annotations

from pytest_bdd import parsers, then

from tests.steps.common import World, same


@then(parsers.parse('the call delivered these "{fid}" events in order:'))
def _events_exact_in_order(world: World, fid: str, docstring: str) -> None:
    assert all(f == fid for f, _ in world.last_events), f"other events fired: {world.last_events!r}"
    same([p for f, p in world.last_events], world.substitute(docstring))
