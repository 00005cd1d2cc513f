"""The storage package's layers, read from the source (no import runs): the shared part
imports no adapter, the memory adapter loads nothing of the fs adapter, and the fs
adapter's modules import each other without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import session_manager

ROOT = Path(session_manager.__file__).parent
STORE = "session_manager.store"


def _modules() -> dict[str, tuple[Path, str]]:
    """Every module of the package: its file and the package its relative imports start from."""
    out: dict[str, tuple[Path, str]] = {}
    for path in ROOT.rglob("*.py"):
        parts = ["session_manager", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
            out[".".join(parts)] = (path, ".".join(parts))
        else:
            out[".".join(parts)] = (path, ".".join(parts[:-1]))
    return out


_PARSED: dict[Path, ast.Module] = {}


def _tree(path: Path) -> ast.Module:
    # Parsed once per run: the cycle check asks for every module's imports many times.
    if path not in _PARSED:
        _PARSED[path] = ast.parse(path.read_text(encoding="utf-8"))
    return _PARSED[path]


def _imports(name: str, modules: dict[str, tuple[Path, str]]) -> set[str]:
    """The package's modules ``name`` imports (type-only imports too: a cycle there is one)."""
    path, package = modules[name]
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def _closure(start: str, modules: dict[str, tuple[Path, str]], within: str) -> set[str]:
    """What ``start`` loads inside ``within`` (a package's ``__init__`` counts as loaded)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(m for m in _imports(name, modules) if m.startswith(within) and m != within)
    return seen


def test_the_memory_adapter_loads_nothing_of_the_fs_adapter() -> None:
    # Prevents: MemoryStore (the small test double) loading the fs adapter's on-disk index format again,
    # as it did through the shared state (_state -> _lazy -> _fsio, _index_format, _lazy_bodies).
    modules = _modules()
    loaded = _closure(f"{STORE}.memory", modules, STORE)
    assert not [m for m in loaded if m.startswith(f"{STORE}.fs")]


def test_the_shared_core_imports_no_adapter() -> None:
    # Prevents: store/_core (state, CAS rules, codec, known sessions) reaching into an adapter,
    # which would make every adapter load another's modules.
    modules = _modules()
    adapters = tuple(f"{STORE}.{a}" for a in ("fs", "sqlite", "postgres", "bridge", "memory"))
    for name in [m for m in modules if m.startswith(f"{STORE}._core")]:
        assert not [m for m in _imports(name, modules) if m.startswith(adapters)], name


def test_the_fs_adapter_and_the_core_have_no_import_cycle() -> None:
    # Prevents: the cycles the flat layout had (_lazy <-> _lazy_path, _watch <-> fs, _cas <-> base)
    # coming back inside the fs package, the shared core or the interface.
    modules = _modules()
    scope = [m for m in modules if m.startswith((f"{STORE}.fs", f"{STORE}._core"))
             or m in (f"{STORE}.base", f"{STORE}.path", f"{STORE}.memory")]
    for name in scope:
        inside = {m for m in _closure(name, modules, STORE) if m != name}
        back = [m for m in inside if name in _imports(m, modules)]
        assert not back, f"{name} is imported back by {back}"
