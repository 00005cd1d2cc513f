"""Instructions per LangGraph ``put`` by part, counted by valgrind's callgrind (load-independent,
unlike the timings of ``bench_langgraph.py``): ``SessionManagerSaver`` beside ``SqliteSaver``.

Run: ``python bench/lg_instr.py [--puts 200] [--durability flush|fsync]`` (valgrind installed;
~3-4 minutes: both savers at once, each ~4 G instructions of imports first). Each saver puts
``bench_langgraph``'s checkpoints (messages + 2 KB settings), 30 as a warm-up, then ``--puts``
more with the cyclic GC off. Each part is wrapped in a C function of CPython's own that nothing
else on the path calls, so callgrind's inclusive cost of that function is the part's cost:

- put: ``functools.reduce`` around the measured puts;
- serializer: ``min(key=...)`` around ``serde.dumps_typed`` (ours: around its ``serialize_values``, the
  serializer memo's work and the messages it serializes, issue 29; its serde is left as it is);
- ours: store call (``SessionManager._append_owned``): ``operator.call``; the fs store's
  ``commit`` within it: ``any(map(...))``; its ``os.write`` step (``_writer.append``):
  ``all(map(...))``; ``encode_docs`` (the checkpoint and metadata documents): ``max(key=...)``;
- SqliteSaver: its ``INSERT`` and ``commit`` (``pysqlite_cursor_execute``,
  ``pysqlite_connection_commit``, C functions already).

Each wrapper adds ~5-12 k instructions to the parts around it (the store call holds two);
compare runs of one version of this script (``--bare``: only the put and the serializer wrapped,
for both savers: the totals compared as they are). ``--own``: each put alone wrapped, the
serializer's output made once per kind of value and then reused, so the count is the saver's own
work besides the serializer (ours with its serializer memo off: its serde's ``dumps_typed`` replaced)
(and the bench's loop around the puts is not in it). Only the measured puts are collected
(``--toggle-collect`` of the ``put`` wrapper): the same C functions called elsewhere (``any``,
``all``, ``max`` at import, the warm-up) would otherwise count in the parts, ~17-26 k per put
each. ``--keep DIR`` keeps the callgrind files.
"""

from __future__ import annotations

import argparse
import functools
import gc
import operator
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTS = {  # callgrind function name -> the part it wraps
    "functools_reduce": "put",
    "builtin_min": "serializer",
    "_operator_call": "store call",
    "builtin_any": "fs commit",
    "builtin_all": "fs write step",
    "builtin_max": "encode_docs",
    "pysqlite_cursor_execute": "INSERT",
    "pysqlite_connection_commit": "commit",
}


def _via(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` called from inside the C function ``kind`` names (its inclusive cost is fn's)."""
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out: list[Any] = []

        def call(*_: Any) -> Any:
            out.append(fn(*args, **kwargs))
            return 0

        if kind == "min":
            min([0], key=call)
        elif kind == "max":
            max([0], key=call)
        elif kind == "any":
            any(map(lambda _: call() and False, [0]))
        elif kind == "all":
            all(map(lambda _: call() or True, [0]))
        else:
            operator.call(call)
        return out[0]
    return wrapped


def child(which: str, puts: int, durability: str, store_kind: str = "fs", bare: bool = False,
          own: bool = False) -> None:
    """The measured process (run under callgrind)."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_langgraph as bench

    import session_manager
    from session_manager.adapters import langgraph as adapter

    tmp = Path(tempfile.mkdtemp())
    saver: Any
    if which == "ours":
        where: Any = f"sqlite:///{tmp.resolve()}/sm.db" if store_kind == "sqlite" else tmp / "sm"
        sm = session_manager.open(where, durability=durability)  # type: ignore[arg-type]
        saver = adapter.SessionManagerSaver(sm)
    if which == "ours" and not (bare or own):
        sm._append_owned = _via("call", sm._append_owned)  # type: ignore[method-assign]
        adapter.encode_docs = _via("max", adapter.encode_docs)  # type: ignore[assignment]
        store: Any = sm.service.store
        store.commit = _via("any", store.commit)
        if hasattr(store, "_writer"):
            store._writer.append = _via("all", store._writer.append)
    if which != "ours":
        saver = bench.sqlite_saver(tmp / "x.db", "NORMAL" if durability == "flush" else None)
    if own:  # (ours: its serializer memo then off, as for any serde not LangGraph's own as it comes)
        saver.serde.dumps_typed = _memoized(saver.serde.dumps_typed)
    elif which == "ours":  # its memo and what it serializes (a wrapped serde would turn the memo off)
        adapter.serialize_values = _via("min", adapter.serialize_values)  # type: ignore[assignment]
    else:
        saver.serde.dumps_typed = _via("min", saver.serde.dumps_typed)
    thread = bench.Thread(saver, "bench", bench.SETTINGS)
    thread.put(30)  # warm-up (with --own, every serialized value the measured puts take made here)
    gc.collect()
    gc.disable()
    if own:  # each put inside the wrapper: the bench's loop around them not counted
        put = saver.put
        saver.put = lambda *a: functools.reduce(lambda _a, _b: put(*a), [0, 0])  # type: ignore[method-assign]
        thread.put(puts)
    else:
        functools.reduce(lambda _a, _b: thread.put(puts), [0, 0])


def _memoized(dumps: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``dumps`` made once per kind of value the bench puts (a messages list by its length, the
    settings, any counter as the first: its bytes and SqliteSaver's whole checkpoint's, made once per
    messages' length, then stand for another value, which nothing reads back here), so a
    put's count is the saver's own work, the serializer's left out (``--own``)."""
    made: dict[Any, Any] = {}

    def memo(value: Any) -> Any:
        if type(value) is dict and "channel_values" in value:
            key: Any = ("checkpoint", len(value["channel_values"]["messages"]))
        else:
            key = (type(value), len(value) if isinstance(value, (list, dict)) else 0)
        out = made.get(key)
        if out is None:
            out = made[key] = dumps(value)
        return out
    return memo


def per_call(out: Path, calls: int, parts: dict[str, str] = PARTS) -> dict[str, float]:
    """Inclusive instructions per call of each wrapper function (``parts``: callgrind function
    name -> the part it wraps) in a callgrind file."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
                          capture_output=True, text=True, check=True).stdout
    found: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) .*?:(\w+) \[", line)
        if m and m.group(2) in parts and parts[m.group(2)] not in found:
            found[parts[m.group(2)]] = int(m.group(1).replace(",", "")) / calls
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=200)
    parser.add_argument("--durability", choices=("flush", "fsync"), default="flush")
    parser.add_argument("--store", choices=("fs", "sqlite"), default="fs",
                        help="the store ours runs over (sqlite: its commit is the sqlite store's)")
    parser.add_argument("--keep", type=Path, help="keep the callgrind files in this directory")
    parser.add_argument("--bare", action="store_true",
                        help="wrap only the put and the serializer (the totals compared without the ~5-12 k "
                             "each of ours' part wrappers adds)")
    parser.add_argument("--own", action="store_true",
                        help="the savers' own work per put: the serializer's output made once per kind of "
                             "value (not counted) and the bench's loop left out; no parts")
    parser.add_argument("--child", choices=("ours", "sqlite"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.puts, args.durability, args.store, args.bare, args.own)
        return
    where = args.keep or Path(tempfile.mkdtemp())
    where.mkdir(parents=True, exist_ok=True)
    runs = {}
    for which in ("ours", "sqlite"):
        out = where / f"callgrind.{which}"
        runs[which] = (out, subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--toggle-collect=functools_reduce", "--separate-threads=yes",
             f"--callgrind-out-file={out}", sys.executable, __file__,
             "--child", which, "--puts", str(args.puts), "--durability", args.durability, "--store", args.store]
            + (["--bare"] if args.bare else []) + (["--own"] if args.own else []),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    results = {}
    for which, (out, proc) in runs.items():
        if proc.wait() != 0:
            raise SystemExit(f"{which}: the callgrind run failed (exit {proc.returncode})")
        results[which] = per_call(Path(f"{out}-01"), args.puts)  # the main thread's (--separate-threads)
    print(f"instructions per put (k), {args.puts} puts after 30, durability={args.durability}, ours over "
          f"{args.store}, GC off" + (", own work (serializer memoized, each put alone)" if args.own else ""))
    for which, found in results.items():
        wrapped = ("put", "serializer") if which == "ours" and (args.bare or args.own) else PARTS.values()
        shown = ", ".join(f"{part} {found[part] / 1e3:.1f}" for part in wrapped if part in found)
        print(f"  {'SessionManagerSaver' if which == 'ours' else 'SqliteSaver':<20} {shown}")
    print("  (over sqlite, fs commit is the sqlite store's commit and INSERT/commit are SQLite's within it)")


if __name__ == "__main__":
    main()
