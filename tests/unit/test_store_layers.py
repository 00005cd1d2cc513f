"""The store package points only down (issue 22): no module under
``session_manager/store`` imports the worker, the service, a host or the CLI,
not even inside a function or for type checking. The worker's factory is the
one place that reads an adapter's configuration value."""

from __future__ import annotations

import ast
from pathlib import Path

import session_manager

STORE = Path(session_manager.__file__).parent / "store"
ABOVE = ("_worker", "_service", "_hosts", "_cli")


def _imported(path: Path) -> list[str]:
    """Every module ``path`` imports, resolved to its dotted name below ``session_manager``."""
    package = path.relative_to(STORE.parent.parent).with_suffix("").parts[:-1]  # a module's or __init__'s
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            out.append(".".join([*base, *([node.module] if node.module else [])]))
    return out


def test_no_store_module_imports_a_layer_above_it() -> None:
    # Prevents: store/postgres/build.py importing _worker.config_client and config_value,
    # and the SQL outboxes importing _worker.runtime for resync_batches (an import cycle
    # of eighteen modules through _worker.bridge_link), coming back.
    upward = [
        f"{path.relative_to(STORE)} imports {name}"
        for path in sorted(STORE.rglob("*.py"))
        for name in _imported(path)
        if name.startswith(tuple(f"session_manager.{layer}" for layer in ABOVE))
    ]
    assert upward == []


def test_the_sql_adapters_are_built_from_plain_settings_by_the_worker() -> None:
    # Prevents: the adapters' build modules reading the worker's configuration model again
    # (only the host's factory reads a configuration value; adapters take dataclasses).
    from session_manager._worker import store_factory
    from session_manager.store.sqlite import build as sqlite_build

    assert hasattr(store_factory, "build_sqlite") and hasattr(store_factory, "build_postgres")
    assert not hasattr(sqlite_build, "build_sqlite")
