"""Steps for the lifecycle and persistence features.

They prove "nothing was written" at the byte level (a snapshot of the whole
data dir compared after a rejected call), that hostile ids never escape the
data dir, and read list pages by session id.
"""

from __future__ import annotations

from pathlib import Path

from pytest_bdd import given, parsers, then, when

from tests.steps.common import World, lookup


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (recursively) with its bytes."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@given("the data dir is snapshotted")
@when("the data dir is snapshotted")
def _snapshot(world: World) -> None:
    world.saved["__data_dir_snapshot__"] = _tree(world.data_dir)


@then("the data dir is unchanged since the snapshot")
def _unchanged(world: World) -> None:
    before = world.saved["__data_dir_snapshot__"]
    after = _tree(world.data_dir)
    assert after.keys() == before.keys(), f"files changed: {sorted(before)} -> {sorted(after)}"
    changed = [name for name in before if before[name] != after[name]]
    assert not changed, f"files rewritten: {changed}"


@then("nothing was written outside the data dir")
def _contained(world: World) -> None:
    # The scenario's temp dir holds only the data dir; an escaping id would
    # create a sibling (or a parent-level) path.
    outside = [p.name for p in world.data_dir.parent.iterdir() if p != world.data_dir]
    assert outside == [], f"written outside data_dir: {outside}"


@then(parsers.parse('the listed session ids are "{ids}"'))
def _listed(world: World, ids: str) -> None:
    got = [m["session_id"] for m in lookup(world.expect_ok(), "sessions")]
    assert got == [i.strip() for i in ids.split(",") if i.strip()]


@then("the listed sessions are none")
def _listed_none(world: World) -> None:
    assert lookup(world.expect_ok(), "sessions") == []


@given(parsers.parse('this line is appended to the file of session "{sid}":'))
@when(parsers.parse('this line is appended to the file of session "{sid}":'))
def _append_line(world: World, sid: str, docstring: str) -> None:
    # Terminated, so the store's next append starts a fresh line after it:
    # the bad line sits in the middle of the log, not at its torn tail.
    with world.session_file(sid).open("ab") as f:
        f.write(docstring.encode("utf-8") + b"\n")
