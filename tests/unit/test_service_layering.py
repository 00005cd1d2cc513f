"""The domain's place in the layers (issue 22): ``_service`` imports only below it.

Read from the source, not from ``sys.modules``: what a module names in its
``import`` statements is what ties the layers together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import session_manager._service as service_package

SERVICE_DIR = Path(service_package.__file__).parent
PACKAGE = "session_manager"

# What the domain may use of the store: the interface, the path view it hands out, and the search
# interface's records and text rules (base names them in its search method).
STORE_INTERFACE = {"session_manager.store.base", "session_manager.store.path",
                   "session_manager.store.search_index", "session_manager.store.search_text"}
# Layers above the domain, and parts beside it it must not lean on.
ABOVE = ("_hosts", "_worker", "_cli", "mentions", "adapters", "viewer", "testing", "aio")


def _imports(path: Path) -> set[str]:
    """The absolute names of the modules ``path`` imports from."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add(node.module or "")
                continue
            # A module of _service: one dot is _service itself, two the package.
            parts = [PACKAGE, "_service"][: 3 - node.level]
            if node.module:
                found.add(".".join([*parts, node.module]))
            else:  # ``from . import core``: the names are modules
                found.update(".".join([*parts, alias.name]) for alias in node.names)
    return found


def _service_modules() -> list[Path]:
    return sorted(SERVICE_DIR.glob("*.py"))


def test_the_domain_imports_no_host_and_no_store_adapter() -> None:
    # Prevents: an upward import (the domain reaching a host, the worker or the CLI) or the domain
    # depending on one storage adapter instead of the interface every adapter implements.
    bad: list[str] = []
    for path in _service_modules():
        for name in _imports(path):
            if not name.startswith(PACKAGE + "."):
                continue
            part = name.split(".")[1]
            if part in ABOVE:
                bad.append(f"{path.name} imports {name} (a layer above the domain)")
            elif part == "store" and name not in STORE_INTERFACE:
                bad.append(f"{path.name} imports {name} (a store adapter or private store module)")
    assert not bad, "\n".join(bad)


def test_capabilities_are_functions_over_one_core_not_mixins() -> None:
    # Prevents: the seven-mixin SessionService coming back (issue 22): no class in the domain
    # derives from ServiceCore, and SessionService derives from nothing of ours.
    for path in _service_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b) for b in node.bases}
                assert "ServiceCore" not in bases, f"{path.name}: {node.name} mixes in ServiceCore"
                if node.name == "SessionService":
                    assert not bases, f"SessionService derives from {sorted(bases)}"


def test_relative_imports_resolve_as_the_check_reads_them() -> None:
    # Prevents: the layering check passing because it misreads relative imports.
    names = _imports(SERVICE_DIR / "service.py")
    assert "session_manager._service.core" in names
    assert "session_manager.store.base" in names
    assert "session_manager._wire" in names
