"""Fresh-clone check: the @pure run of a clone with nothing beside it must pass
exactly the tests the full run passes, less the listed optional ones (those
needing an engine or the reference material beside the repository).

    python .ci/compare_counts.py FULL.xml FRESH.xml OPTIONAL.txt

FULL/FRESH are pytest JUnit XML reports; OPTIONAL is `pytest --collect-only -q`
output of the optional tests (`-m "not pure or reference"`: what the @pure
selection leaves out, i.e. @engine and the postgres re-runs of the scenarios, and
what needs the reference material beside the repository).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def passed(report: Path) -> set[str]:
    out = set()
    for case in ET.parse(report).iter("testcase"):
        if not any(child.tag in ("failure", "error", "skipped") for child in case):
            out.add(f"{case.get('classname')}::{case.get('name')}")
    return out


def node_key(node_id: str) -> str:
    """``tests/unit/test_x.py::Class::test_y[p]`` -> ``tests.unit.test_x.Class::test_y[p]`` (the JUnit form)."""
    path, _, rest = node_id.partition(".py::")
    head, bracket, params = rest.partition("[")  # parameters may hold "::" themselves
    *classes, name = head.split("::")
    return ".".join([path.replace("/", "."), *classes]) + "::" + name + bracket + params


def main(full_xml: str, fresh_xml: str, optional_txt: str) -> int:
    full, fresh = passed(Path(full_xml)), passed(Path(fresh_xml))
    optional = {node_key(line.strip()) for line in Path(optional_txt).read_text().splitlines() if "::" in line}
    expected = full - optional
    print(f"full run passed {len(full)}; optional tests listed {len(optional)} "
          f"({len(full & optional)} of them passed in the full run); expected on a fresh clone {len(expected)}; "
          f"fresh clone @pure passed {len(fresh)}")
    if fresh == expected:
        return 0
    for name in sorted(expected - fresh)[:20]:
        print(f"  passes in the full run but not on a fresh clone: {name}")
    for name in sorted(fresh - expected)[:20]:
        print(f"  passes on a fresh clone but is not expected: {name}")
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
