"""``pytest --tags @pure`` from the root, ``--tags=@pure`` anywhere, and
``pytest -m pure`` select the same tests.

The root files ``pure`` and ``engine`` exist only because pytest expands
``@pure`` to the arguments in the file ``pure`` (one per line); their note
after ``#`` must still parse as the tag.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import wanted_tags
from tests.material import REPO

TARGETS = ["tests/test_features.py", "tests/unit/test_encoding.py"]


def collected(*args: str, cwd: Path = REPO) -> list[str]:
    targets = [str((REPO / t).relative_to(cwd)) for t in TARGETS]
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *args, *targets],
                         cwd=cwd, capture_output=True, text=True, timeout=120)
    assert run.returncode in (0, 5), run.stdout + run.stderr  # 5: nothing selected
    # Node ids are relative to the rootdir whatever the working directory.
    return sorted(line for line in run.stdout.splitlines() if "::" in line)


@pytest.mark.parametrize("tag", ["pure", "engine"])
def test_root_file_is_one_argument_naming_its_tag(tag: str) -> None:
    # Prevents: a note in the file turning into a stray argument or a wrong tag.
    lines = (REPO / tag).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and "why this file exists" in lines[0]
    assert wanted_tags(lines[0]) == {tag}


def test_tag_values() -> None:
    # Prevents: separators or the @ prefix changing which tags are wanted.
    assert wanted_tags("@pure,@engine") == {"pure", "engine"}
    assert wanted_tags(" pure  engine # a note, @ignored") == {"pure", "engine"}
    assert wanted_tags("@") == set()


@pytest.mark.slow  # the slow lane (`pytest -m slow`): runs pytest four times
def test_every_spelling_selects_the_same_tests() -> None:
    # Prevents: `--tags @pure` (file expansion, from the root), `--tags=@pure` (from anywhere) and
    # `-m pure` drifting apart, or a test counted as both pure and engine.
    expanded = collected("--tags", "@pure")
    assert expanded
    assert collected("--tags=@pure", cwd=REPO / "tests") == expanded
    assert collected("-m", "pure") == expanded
    engine = collected("--tags", "@engine")
    assert engine and not set(engine) & set(expanded)
