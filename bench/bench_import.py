"""How long `import session_manager` takes in a fresh interpreter.

Runs the import in N new processes and prints the best and median wall
time, and the CPU time (less disturbed by other load on a shared machine),
beside the same figures for `import pydantic` plus one model class (the floor
any pydantic-based package pays) and for an empty interpreter. Also lists
heavy modules the import must not pull in (the iii SDK, yaml, tqdm).

    python bench/bench_import.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

PROBE = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
{code}
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
avoid = {{"iii", "iii_helpers", "yaml", "tqdm", "regex", "websockets"}}
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & avoid)
print(json.dumps({{"wall_ms": wall * 1000, "cpu_ms": cpu * 1000, "heavy": heavy}}))
"""

CASES = {
    "import session_manager": "import session_manager",
    "pydantic + one model (floor)": "import pydantic\nclass A(pydantic.BaseModel):\n    x: int",
    "empty": "pass",
}


def measure(code: str, runs: int) -> dict[str, object]:
    samples = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", PROBE.format(code=code)], capture_output=True, text=True,
                             check=True)
        samples.append(json.loads(out.stdout))
    walls = [s["wall_ms"] for s in samples]
    cpus = [s["cpu_ms"] for s in samples]
    return {"best_ms": min(walls), "median_ms": statistics.median(walls), "cpu_best_ms": min(cpus),
            "heavy": samples[0]["heavy"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print(f"{'case':32} {'best ms':>8} {'median':>8} {'cpu ms':>8}  heavy modules loaded")
    for name, code in CASES.items():
        r = measure(code, args.runs)
        print(f"{name:32} {r['best_ms']:8.1f} {r['median_ms']:8.1f} {r['cpu_best_ms']:8.1f}  "
              f"{', '.join(r['heavy']) or '-'}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
