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

The suite runs on pytest-xdist workers (``-n auto`` in pyproject's addopts,
one per core plus as many again, since most tests wait on fsync, threads,
subprocesses or PostgreSQL rather than compute; ``-n0`` runs in one process).
Tests marked ``engine`` share one engine, where only one session-manager
surface may be registered at a time, so a run with ``III_ENGINE_WS_URL`` set is
one process (see ``pytest_xdist_auto_num_workers``).

Tests marked ``slow`` (crash loops, soaks, the mypy run, the benchmark
instrument, the suite collecting itself) are the slow lane: a run that names no
paths and whose ``-m`` does not mention ``slow`` leaves them out (plain
``pytest``, ``pytest -m pure``, ``pytest --tags @pure`` alike); ``pytest -m
slow`` runs them, ``.ci/run`` runs them every time, and naming their files or
ids runs them too.
"""

from __future__ import annotations

import os
import re
import sys
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

# Compiled modules are cached even where PYTHONDONTWRITEBYTECODE is set (as on this project's CI
# image): else every xdist worker, and each of the suite's hundreds of subprocesses (CLI runs, workers,
# crash-loop writers), compiles the package and rewrites the test modules from source again (measured:
# a CLI run 0.66 s of CPU, 0.40 s cached; a collection 16 s, 9 s cached). Set before the workers and
# subprocesses start, so they inherit it. __pycache__ is git-ignored and left out of the sdist.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

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


SLOW = "slow"


def leaves_out_slow(config: pytest.Config) -> bool:
    """Is the slow lane left out of this run? (No paths named, and no ``-m`` mentioning it.)"""
    if config.args_source is pytest.Config.ArgsSource.ARGS:
        return False
    return re.search(rf"\b{SLOW}\b", config.option.markexpr or "") is None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: twice the cores (at least 2, at most 8), as the tests mostly wait;
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides it. A ``--collect-only`` run stays in one process."""
    if config.getoption("collectonly"):
        return 0
    if os.environ.get("III_ENGINE_WS_URL"):
        # The @engine tests share that one engine and must not run at once. xdist's loadgroup
        # does not keep an xdist_group on one worker under pytest 9 (measured: the worker's
        # group suffix never reaches the node ids), so a run with an engine is one process.
        return 0
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if chosen and chosen.isdigit():
        return int(chosen)
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


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
    dropped: list[pytest.Item] = []
    kept: list[pytest.Item] = []
    no_slow = leaves_out_slow(config)
    for item in items:
        rerun = _postgres_rerun(item)
        if rerun is False or (no_slow and item.get_closest_marker(SLOW) is not None):
            dropped.append(item)
            continue
        if rerun and Path(str(item.fspath)) == _PG_FEATURES:  # a @pure scenario over postgres: not pure
            item.own_markers[:] = [m for m in item.own_markers if m.name != "pure"]
        kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if leaves_out_slow(config):
        terminalreporter.write_line(f"the slow lane was left out: `pytest -m {SLOW}` runs it (.ci/run runs both)")
