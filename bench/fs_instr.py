"""Instructions per fs-store append, counted by valgrind's callgrind (load-independent).

    python bench/fs_instr.py [--appends 1000] [--durability flush|fsync] [--keep DIR]

Three appenders over one fs store each, in three processes at once (each ~4 G instructions of
imports first, ~1-2 minutes): the typed ``sm.append(sid, message=...)``, the dict call
``sm.call("session::append", ...)`` and the adapters' owned custom append
(``sm._append_owned``, with ``data_json`` as the LangGraph saver hands it). After 200 warm-up
appends the measured ones run inside ``functools.reduce`` (the only thing collected:
``--toggle-collect``), the cyclic GC off; the store's ``commit`` is wrapped in ``any(map(...))``
so its inclusive cost is reported beside the whole append's (the wrapper adds ~5-12 k to the
whole: compare runs of one version of this script).
"""

from __future__ import annotations

import argparse
import functools
import gc
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("typed", "call", "owned")
PARTS = {"functools_reduce": "append", "builtin_any": "fs commit"}


def child(kind: str, appends: int, durability: str) -> None:
    """The measured process (run under callgrind)."""
    sys.path.insert(0, str(ROOT))
    import session_manager
    from session_manager.messages import user_message

    sm = session_manager.open(Path(tempfile.mkdtemp()) / "sm", durability=durability)  # type: ignore[arg-type]
    sid = sm.create().session_id
    store: Any = sm.service.store
    commit = store.commit

    def wrapped(*args: Any) -> Any:
        out: list[Any] = []
        def call(_: int) -> bool:
            out.append(commit(*args))
            return False

        any(map(call, [0]))
        return out[0]

    store.commit = wrapped
    typed = user_message("hello " * 8, timestamp=1)
    plain = {"role": "user", "content": [{"type": "text", "text": "hello " * 8}], "timestamp": 1}
    data = {"v": {"messages": ["m"] * 20, "n": 3}, "settings": "x" * 2000}
    data_json = orjson.dumps(data)

    def one() -> None:
        if kind == "typed":
            sm.append(sid, message=typed)
        elif kind == "call":
            sm.call("session::append", {"session_id": sid, "message": plain})
        else:
            sm._append_owned(sid, "checkpoint", data, data_json=data_json)

    for _ in range(200):
        one()
    gc.collect()
    gc.disable()

    def run(_a: int, _b: int) -> int:
        for _ in range(appends):
            one()
        return 0

    functools.reduce(run, [0, 0])


def main() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from lg_instr import per_call  # (the parent only: the measured child imports nothing of it)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--durability", choices=("flush", "fsync"), default="flush")
    parser.add_argument("--keep", type=Path, help="keep the callgrind files in this directory")
    parser.add_argument("--only", choices=KINDS, action="append", help="run only these appenders")
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.appends, args.durability)
        return
    where = args.keep or Path(tempfile.mkdtemp())
    where.mkdir(parents=True, exist_ok=True)
    runs = {}
    for kind in args.only or KINDS:
        out = where / f"callgrind.{kind}"
        runs[kind] = (out, subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--toggle-collect=functools_reduce", "--separate-threads=yes",
             f"--callgrind-out-file={out}", sys.executable, __file__, "--child", kind,
             "--appends", str(args.appends), "--durability", args.durability],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    print(f"instructions per append (k), {args.appends} appends after 200, durability={args.durability}, GC off")
    for kind, (out, proc) in runs.items():
        if proc.wait() != 0:
            raise SystemExit(f"{kind}: the callgrind run failed (exit {proc.returncode})")
        found = per_call(Path(f"{out}-01"), args.appends, PARTS)  # the main thread's (--separate-threads)
        print(f"  {kind:<6} " + ", ".join(f"{part} {found[part] / 1e3:.1f}" for part in PARTS.values()
                                         if part in found))


if __name__ == "__main__":
    main()
