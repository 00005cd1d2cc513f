"""Test-suite wiring: step libraries, the ``--tags`` selector, suite markers.

``pytest --tags @pure`` and ``pytest -m pure`` select the same tests: the
Gherkin scenarios tagged @pure plus the unit and property tests, which need
nothing but a temp dir. @engine scenarios need an engine at
``III_ENGINE_WS_URL`` and skip cleanly without one.

pytest reads an argument starting with ``@`` as "arguments from this file"
(one argument per line), so ``--tags @pure`` reaches us as the line of the
file ``pure`` at the repository root: the word ``pure``, then a ``#`` note
saying why the file exists, which :func:`wanted_tags` drops; ``engine``
likewise. ``--tags=@pure`` is never expanded and works from any directory.
Both spellings, ``@pure`` and ``pure``, are accepted.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pytest_bdd.scenario import scenario_wrapper_template_registry

pytest_plugins = [
    "tests.steps.common",
    "tests.steps.mention_steps",
    "tests.steps.message_steps",
    "tests.steps.lifecycle_steps",
    "tests.steps.attachment_steps",
    "tests.steps.engine_steps",
    "tests.steps.bridge_steps",
    "tests.steps.ownership_steps",
    "tests.steps.seed_steps",
    "tests.steps.erasure_steps",
]

_HERE = Path(__file__).parent
_PURE_DIRS = (_HERE / "tests" / "unit", _HERE / "tests" / "property")
_PG_FEATURES = _HERE / "tests" / "test_features_postgres.py"
_RERUNS = (_PG_FEATURES, _HERE / "tests" / "test_features_sqlite.py")
# Steps that read or fake the fs adapter's files: meaningless over another adapter.
_FS_STEP = re.compile(r"\bfiles?\b|data dir|attachment folder|attachments root|crash left|metadata write fails")


def _postgres_rerun(item: pytest.Item) -> bool | None:
    """For a scenario of a re-run over another adapter: keep it? (``None``: not one.)"""
    if Path(str(item.fspath)) not in _RERUNS:
        return None
    template = scenario_wrapper_template_registry.get(getattr(item, "obj", None))  # type: ignore[arg-type]
    if template is None or item.get_closest_marker("pure") is None:
        return False
    steps = list(template.steps)
    return not any(_FS_STEP.search(step.name) for step in steps)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tags",
        action="store",
        default=None,
        help="run only tests carrying one of these tags, e.g. '@pure' or '@pure,@engine'",
    )


def wanted_tags(raw: str) -> set[str]:
    """The tags a ``--tags`` value names; text after ``#`` is a note."""
    raw = raw.split("#", 1)[0]
    return {t.strip().lstrip("@") for t in raw.replace(",", " ").split() if t.strip().lstrip("@")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rerun_dropped: list[pytest.Item] = []
    kept: list[pytest.Item] = []
    for item in items:
        rerun = _postgres_rerun(item)
        if rerun is False:
            rerun_dropped.append(item)
            continue
        if rerun and Path(str(item.fspath)) == _PG_FEATURES:  # a @pure scenario over postgres: not pure
            item.own_markers[:] = [m for m in item.own_markers if m.name != "pure"]
        kept.append(item)
    if rerun_dropped:
        config.hook.pytest_deselected(items=rerun_dropped)
        items[:] = kept
    for item in items:
        path = Path(str(item.fspath))
        if (any(d in path.parents for d in _PURE_DIRS) and item.get_closest_marker("engine") is None
                and item.get_closest_marker("browser") is None
                and item.get_closest_marker("postgres") is None):
            item.add_marker(pytest.mark.pure)
    raw = config.getoption("--tags")
    if not raw:
        return
    wanted = wanted_tags(raw)
    keep, drop = [], []
    for item in items:
        (keep if any(item.get_closest_marker(t) for t in wanted) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
