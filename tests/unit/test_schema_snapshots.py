"""The JSON Schemas the worker registers, pinned as files in the repository.

``tests/snapshots/schemas/<function id, "::" as ".">.json`` holds, for every
function the iii host registers, the request and response schema it sends
with ``register_function``. A change to a model shows up here as a diff to
review (the wire contract changed), not as a surprise for clients. After a
deliberate change, rewrite the files with::

    python -m tests.unit.test_schema_snapshots
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

from session_manager._worker.config_value import parse_config
from session_manager._worker.iii_host import IIIHost
from session_manager.testing import FakeEngine
from tests.material import SNAPSHOTS

FOLDER = SNAPSHOTS / "schemas"


def file_name(function_id: str) -> str:
    return function_id.replace("::", ".") + ".json"


def registered_schemas() -> dict[str, dict[str, Any]]:
    """What the host registers, by function id, as a snapshot document."""
    fake = FakeEngine()
    with tempfile.TemporaryDirectory() as data_dir:
        host = IIIHost(fake, parse_config({"adapter": {"name": "fs", "config": {"data_dir": data_dir}}}))
        try:
            host.register()
        finally:
            host.close()
    return {
        fid: {"function_id": fid, "request_schema": reg.request_format, "response_schema": reg.response_format}
        for fid, reg in fake.functions.items()
    }


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_registered_schemas_match_the_snapshots() -> None:
    # Prevents: a model change silently altering the registered wire contract.
    current = registered_schemas()
    assert len(current) >= 27
    for fid, document in current.items():
        path = FOLDER / file_name(fid)
        assert path.exists(), f"{fid}: no snapshot (run python -m tests.unit.test_schema_snapshots)"
        assert path.read_text(encoding="utf-8") == render(document), f"{fid}: registered schema differs from {path}"


def test_no_snapshot_without_a_registration() -> None:
    # Prevents: a stale snapshot pinning a function the worker no longer registers.
    expected = {file_name(fid) for fid in registered_schemas()}
    assert sorted(p.name for p in FOLDER.glob("*.json")) == sorted(expected)


def write_snapshots() -> int:
    FOLDER.mkdir(parents=True, exist_ok=True)
    current = registered_schemas()
    for stale in FOLDER.glob("*.json"):
        if stale.name not in {file_name(fid) for fid in current}:
            stale.unlink()
    for fid, document in current.items():
        (FOLDER / file_name(fid)).write_text(render(document), encoding="utf-8")
    print(f"wrote {len(current)} schema snapshots to {FOLDER}")
    return 0


if __name__ == "__main__":
    sys.exit(write_snapshots())
