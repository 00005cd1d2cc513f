"""The ``session-manager data`` subcommands: argument parsing and one handler each.

Every handler returns an :class:`Outcome`: the JSON document ``--json``
prints, the text printed otherwise, and the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..._args import OneLineParser
from ..._browse import reading, render
from ..._browse.filters import metadata_filter
from ..._hosts.surface import BY_ID
from ..._wire.models import STATUSES
from ...errors import DataDirError, SessionError, StoreError, UsageError, invalid_request, not_found
from ...store.fs import FsStore
from . import fsck, fsck_store, maintenance, purging, serving, transfer, usage
from .opening import is_engine, is_uri, open_for
from .outcome import Handler, Outcome
from .progress import progress
from .usage import DIR, EVERY_TARGET, POSTGRES, SQLITE

ORDERS = ("created_asc", "created_desc", "updated_desc")

def is_read_function(function_id: str) -> bool:
    """What ``data call`` may run on a read-only open: the surface marks every writer."""
    return not BY_ID[function_id].mutates


# -- ls / show ------------------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> Outcome:
    metadata = metadata_filter(args.meta)
    with open_for(args.data_dir, writable=False) as sm:
        metas = reading.all_sessions(sm, status=args.status, metadata=metadata, order=args.sort)
        # MESSAGES counts the active path, as `show` does (message_count counts every branch).
        active = {m["session_id"]: reading.active_message_count(sm, m["session_id"]) for m in metas}
    rows = [[m["session_id"], m["status"], str(active[m["session_id"]]), render.when(m["updated_at"]),
             m.get("forked_from") or "-", render.one_line(m.get("title") or "", 60)] for m in metas]
    header = ["SESSION", "STATUS", "MESSAGES", "UPDATED (UTC)", "FORKED FROM", "TITLE"]
    text = render.table(header, rows) if rows else "no sessions"
    return Outcome({"sessions": metas, "active_message_counts": active}, text)


def cmd_show(args: argparse.Namespace) -> Outcome:
    with open_for(args.data_dir, writable=False) as sm:
        meta = reading.session_meta(sm, args.session)
        if args.tree:
            tree = reading.branch_tree(sm, args.session)
            ordered = sorted(tree.entries.values(), key=lambda e: (e["timestamp"], e["id"]))
            nodes = [{"entry": e, "active": e["id"] in tree.active} for e in ordered]
            return Outcome({"meta": meta, "leaf": tree.leaf, "entries": nodes}, render.tree(meta, tree))
        items = reading.active_transcript(sm, args.session)
    return Outcome({"meta": meta, "messages": items},
                   render.transcript(meta, items, sum(1 for i in items if i.get("message") is not None)))


# -- export / import ------------------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> Outcome:
    to_stdout = args.output in (None, "-")
    if args.markdown and args.html:
        raise UsageError("--markdown and --html: choose one format")
    if (args.markdown or args.html) and len(args.sessions) != 1:
        raise UsageError(f"--{'html' if args.html else 'markdown'} exports one session: name exactly one SESSION")
    if (args.markdown or args.html) and args.meta:
        raise UsageError("--meta selects sessions to export as JSON Lines, not one document")
    if args.all_branches is False and not (args.markdown or args.html):
        raise UsageError("--active-path: a JSON Lines export carries every branch (use --markdown or --html)")
    if args.meta and args.sessions:  # before the output file is opened: a usage error touches nothing
        raise UsageError("--meta selects the sessions to export: name no SESSION with it")
    with open_for(args.data_dir, writable=False) as sm, _export_target(args.output) as out:
        if args.markdown or args.html:
            every = args.html if args.all_branches is None else args.all_branches
            out.write(_one_document(sm, args.sessions[0], html=args.html, all_branches=every))
            count = 1
        else:
            metadata = metadata_filter(args.meta) or None
            ids = list(args.sessions) or [m["session_id"]
                                          for m in reading.all_sessions(sm, metadata=metadata, order="created_asc")]
            for sid in ids:  # unknown ids fail before anything is written
                if sm.service.store.get_meta(sid) is None:
                    raise not_found(sid)
            count = 0
            for sid in progress(ids, len(ids), "export"):
                document = transfer.export_document(sm.service.store, sid, with_bytes=args.attachments)
                if document is not None:  # deleted by a live writer meanwhile
                    out.write(transfer.dumps(document) + "\n")
                    count += 1
    if to_stdout:
        return Outcome(None, "")  # stdout is the export itself: no summary mixed into it
    return Outcome({"sessions": count, "output": args.output},
                   f"exported {render.plural(count, 'session')} to {args.output}")


def _one_document(sm: Any, session_id: str, *, html: bool, all_branches: bool) -> str:
    """One session as a self-contained HTML page or as Markdown: every branch, or its active path only."""
    if html:
        from ...viewer.export import export_html

        return export_html(sm, session_id, all_branches=all_branches)
    meta = reading.session_meta(sm, session_id)
    if all_branches:
        return render.markdown_branches(meta, reading.branch_tree(sm, session_id))
    return render.markdown(meta, reading.active_transcript(sm, session_id))


@contextlib.contextmanager
def _export_target(output: str | None) -> Iterator[TextIO]:
    """stdout, or a file written as a temp file renamed into place once the export is complete
    (a failed export leaves no half file)."""
    if output in (None, "-"):
        yield sys.stdout
        sys.stdout.flush()
        return
    path = Path(output)
    tmp = path.with_name(path.name + ".partial")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            yield f
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _read_lines(source: str) -> list[bytes]:
    """The file's lines as bytes: each is decoded (strictly) by the import's own check."""
    if source == "-":
        return sys.stdin.buffer.read().splitlines()
    try:
        return Path(source).read_bytes().splitlines()
    except OSError as e:
        raise DataDirError(f"cannot read {source}: {e}") from None


def cmd_import(args: argparse.Namespace) -> Outcome:
    lines = _read_lines(args.file)
    with open_for(args.data_dir, writable=True) as sm:
        # Check every line first, with the limits the API applies: a bad document imports nothing.
        limits = sm.service.limits.get()
        parsed = [transfer.parse_document(line, n, limits) for n, line in enumerate(lines, 1) if line.strip()]
        ids = [p.session_id for p in parsed]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise invalid_request(f"the file holds session {duplicates[0]!r} more than once")
        store = sm.service.store
        existing = [doc.session_id for doc in parsed if transfer.stored(store, doc)]
        if existing:
            raise invalid_request(f"session {existing[0]!r} already exists in {args.data_dir}; nothing was imported")
        loaded = transfer.Loaded()
        transfer.load_all(store, progress(parsed, len(parsed), "import"), loaded, args.data_dir)
    data = {"sessions": loaded.sessions, "entries": loaded.entries, "attachments": loaded.attachments,
            "attachments_without_bytes": loaded.attachments_without_bytes}
    text = (f"imported {render.plural(loaded.sessions, 'session')}, "
            f"{render.plural(loaded.entries, 'entry', 'entries')}, {render.plural(loaded.attachments, 'attachment')}")
    if loaded.attachments_without_bytes:
        left_out = render.plural(loaded.attachments_without_bytes, "attachment")
        text += f"; {left_out} had no bytes in the file and were left out (export with --attachments)"
    return Outcome(data, text)


# -- fsck / compact ---------------------------------------------------------------------------------------


def cmd_fsck(args: argparse.Namespace) -> Outcome:
    data_dir = Path(args.data_dir)
    if is_uri(args.data_dir):
        return _fsck_database(args)
    if not data_dir.is_dir():
        raise DataDirError(f"data_dir {args.data_dir} does not exist or is not a directory")
    repaired: list[fsck.Problem] = []
    if args.repair:
        # Writable open: only where no writer holds the data_dir; checked again under it.
        with open_for(data_dir, writable=True):
            report = fsck.check(data_dir)
            repaired = fsck.cut_torn_tails(data_dir, report.problems)
        if repaired:
            report = fsck.check(data_dir)
    else:
        names = fsck.log_names(data_dir)
        report = fsck.check(data_dir, progress(names, len(names), "fsck"))
    data = {**report.to_json(), "repaired": [{"file": p.file, "line": p.line, "cut_to_bytes": p.offset}
                                             for p in repaired]}
    lines = [p.text() for p in report.problems]
    lines += [f"repaired {p.file}: cut the torn tail at line {p.line} (now {p.offset} bytes)" for p in repaired]
    errors = sum(p.severity == "error" for p in report.problems)
    warnings = len(report.problems) - errors
    verdict = "healthy" if report.healthy else "NOT healthy"
    lines.append(f"{verdict}: {render.plural(report.sessions, 'session log')}, {render.plural(errors, 'error')}, "
                 f"{render.plural(warnings, 'warning')}")
    return Outcome(data, "\n".join(lines), 0 if report.healthy else 1)


def _fsck_database(args: argparse.Namespace) -> Outcome:
    if args.repair:
        raise UsageError("fsck --repair cuts torn tails of fs logs; a sqlite database has none")
    if not str(args.data_dir).startswith("sqlite://"):
        raise DataDirError("fsck checks an fs data_dir or a sqlite:/// database; postgres checks itself")
    with open_for(args.data_dir, writable=False) as sm:
        report = fsck_store.check(sm.service.store, str(args.data_dir))
    lines = [p.text() for p in report.problems]
    errors = sum(p.severity == "error" for p in report.problems)
    verdict = "healthy" if report.healthy else "NOT healthy"
    lines.append(f"{verdict}: {render.plural(report.sessions, 'session')}, {render.plural(errors, 'error')}, "
                 "0 warnings")
    return Outcome({**report.to_json(), "repaired": []}, "\n".join(lines), 0 if report.healthy else 1)


def cmd_compact(args: argparse.Namespace) -> Outcome:
    # A writable open would create a missing directory: a mistyped path must fail, not "compact" a new one.
    if not is_uri(args.data_dir) and not Path(args.data_dir).is_dir():
        raise DataDirError(f"data_dir {args.data_dir} does not exist or is not a directory")
    with open_for(args.data_dir, writable=True) as sm:
        store = sm.service.store
        if not isinstance(store, FsStore):
            raise DataDirError("compact rewrites the logs of an fs data_dir; other adapters need no compaction")
        ids = [m["session_id"] for m in store.list_metas()]
        done = [c for sid in progress(sorted(ids), len(ids), "compact")
                if (c := maintenance.compact_session(store, sid)) is not None]
    saved = sum(c.bytes_before - c.bytes_after for c in done)
    lines = [f"{c.session_id}: {c.bytes_before} -> {c.bytes_after} bytes" for c in done]
    lines.append(f"compacted {len(done)} of {render.plural(len(ids), 'session log')}, "
                 f"{render.plural(saved, 'byte')} saved")
    return Outcome({"sessions": len(ids), "compacted": [c.to_json() for c in done], "bytes_saved": saved},
                   "\n".join(lines))


# -- call / schema -----------------------------------------------------------------------------------------


def cmd_call(args: argparse.Namespace) -> Outcome:
    usage.function(args.function)
    try:
        payload = json.loads(args.payload)
    except ValueError as e:
        raise UsageError(f"JSON: {e}") from None
    if is_engine(args.data_dir) and not is_read_function(args.function):
        raise UsageError(f"{args.function} writes; a ws:// engine URL is opened read-only")
    with open_for(args.data_dir, writable=not is_read_function(args.function)) as sm:
        result = sm.call(args.function, payload)
    return Outcome(result, json.dumps(result, ensure_ascii=False, indent=2))


def type_name(prop: Any) -> str:
    """A short name for a JSON Schema node: its type, the model it references, or a union of those."""
    if not isinstance(prop, dict):
        return "any"
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return "|".join(type_name(p) for p in prop[key])
    kind = prop.get("type")
    if kind == "array":
        return f"list[{type_name(prop.get('items'))}]"
    if isinstance(kind, list):
        return "|".join(map(str, kind))
    return str(kind) if kind else "any"


def _fields(schema: dict[str, Any]) -> list[list[str]]:
    required = set(schema.get("required", []))
    return [[name, type_name(prop), "yes" if name in required else "", render.one_line(prop.get("description", ""))]
            for name, prop in (schema.get("properties") or {}).items()]


def cmd_schema(args: argparse.Namespace) -> Outcome:
    from ..._wire.schemas import json_schema  # the registered form

    function = usage.function(args.function)
    request = json_schema(function.request)
    response = json_schema(function.response, nullable=function.nullable)
    data = {"function_id": function.id, "description": function.description, "mutates": function.mutates,
            "request_schema": request, "response_schema": response}
    header = ["FIELD", "TYPE", "REQUIRED", "DESCRIPTION"]
    text = "\n".join([
        f"{function.id}: {function.description}", "",
        "request", render.table(header, _fields(request)) if request.get("properties") else "(no fields)", "",
        f"response{' (or null)' if function.nullable else ''}",
        render.table(header, _fields(json_schema(function.response))), "",
        "full JSON Schemas: session-manager data schema " + function.id + " --json",
    ])
    return Outcome(data, text)


# -- parser -------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="session-manager data", description=(
        "Inspect, export, import, check and repair a data_dir without an engine. Reads are safe beside a "
        "running worker; compact, fsck --repair, import and writing calls need the data_dir to themselves."),
        epilog="exit status: 0 done (fsck: healthy), 1 failed (fsck: not healthy), 2 bad arguments (usage errors)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND", parser_class=OneLineParser)

    def command(name: str, handler: Handler, help_text: str, *, data_dir: bool = True,
                accepts: frozenset[str] = EVERY_TARGET, engine: str | None = None) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if data_dir:
            # The help names exactly the targets the command takes; _run refuses the others (exit 2).
            p.add_argument("data_dir", metavar="DATA_DIR", help=usage.target_help(accepts, engine))
        p.add_argument("--json", action="store_true", help="print JSON for scripts instead of text")
        p.set_defaults(handler=handler, accepts=accepts if data_dir else None)
        return p

    p = command("ls", cmd_ls, "list sessions")
    p.add_argument("--status", choices=STATUSES, help="only sessions with this status")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                   help="only sessions whose metadata has KEY equal to VALUE (JSON or text); repeatable")
    p.add_argument("--sort", choices=ORDERS, default="updated_desc", help="order (default: %(default)s)")

    p = command("show", cmd_show, "print a session's active transcript, or with --tree every branch")
    p.add_argument("session", metavar="SESSION", help="session id")
    p.add_argument("--tree", action="store_true", help="every branch, the active path marked with *")

    p = command("export", cmd_export, "write sessions as JSON Lines (one document each), or one as Markdown or HTML")
    p.add_argument("sessions", metavar="SESSION", nargs="*", help="session ids (default: every session)")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.add_argument("--attachments", action="store_true", help="include attachment bytes (base64)")
    p.add_argument("--markdown", action="store_true", help="one session's active transcript as Markdown")
    p.add_argument("--html", action="store_true",
                   help="one session as a self-contained HTML page (every branch; opens from disk)")
    branches = p.add_mutually_exclusive_group()
    branches.add_argument("--all-branches", dest="all_branches", action="store_true", default=None,
                          help="every branch (the default for --html and JSON Lines; --markdown adds the "
                               "other branches after the active transcript)")
    branches.add_argument("--active-path", dest="all_branches", action="store_false",
                          help="only the active path (the default for --markdown; --html leaves the "
                               "alternatives out)")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                   help="only sessions whose metadata has KEY equal to VALUE (one tenant); repeatable")

    p = command("purge", purging.cmd_purge, "delete whole sessions by age (--idle-days) and/or tenant (--meta)",
                engine="a ws:// URL with --dry-run only (a main worker's sessions over its engine, read-only)")
    purging.add_arguments(p)

    p = command("serve", serving.cmd_serve, "a live web viewer of the sessions (read-only; Ctrl-C stops it)")
    serving.add_arguments(p)

    p = command("import", cmd_import, "load an export file (JSON Lines) into a data_dir",
                accepts=frozenset({DIR, POSTGRES, SQLITE}))
    p.add_argument("file", metavar="FILE", help="the export file, or - for stdin")

    p = command("fsck", cmd_fsck, "check every log and attachment of an fs data_dir, or a sqlite:/// database's "
                                  "integrity and chains (postgres checks itself); exit 1 when not healthy",
                accepts=frozenset({DIR, SQLITE}))
    p.add_argument("--repair", action="store_true",
                   help="cut torn tails of an fs data_dir's logs (needs the data_dir to itself; "
                        "a sqlite database has none)")

    command("compact", cmd_compact, "rewrite every log of an fs data_dir as its live state (needs the data_dir to "
                                    "itself; other adapters need no compaction)", accepts=frozenset({DIR}))

    p = command("call", cmd_call, "run one session function (read-only open for reads; a ws:// URL only reads)")
    p.add_argument("function", metavar="FUNCTION", help="e.g. session::messages")
    p.add_argument("payload", metavar="JSON", help="the request object")

    p = command("schema", cmd_schema, "a function's request and response fields", data_dir=False)
    p.add_argument("function", metavar="FUNCTION", help="a function id, e.g. session::append")
    parser.set_defaults(subcommands=tuple(sub.choices))
    return parser


def run(argv: Sequence[str]) -> int:
    parser = build_parser()
    usage.check_subcommand(parser, argv, parser.get_default("subcommands"))
    args, extra = parser.parse_known_args(list(argv))
    if extra and args.command == "export" and not any(e.startswith("-") for e in extra):
        # argparse fills SESSION... before the first option: `export DIR --markdown s_1` left s_1 over.
        args.sessions = [*args.sessions, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return _run(args)
    except BrokenPipeError:
        # The reader went away (`| head -1`): stop quietly, as other Unix tools do, and point stdout at
        # /dev/null so the interpreter's final flush does not report the same broken pipe again.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        return 1


def _run(args: argparse.Namespace) -> int:
    try:
        if args.accepts is not None:
            usage.check_target(args.command, args.data_dir, args.accepts)
        outcome: Outcome = args.handler(args)
    except BrokenPipeError:
        raise  # not the command's failure: the reader of its output left (see run)
    except UsageError as e:  # exit 2, as argparse's own errors (the exit status documented in --help)
        if args.json:
            print(json.dumps({"error": {"code": None, "message": str(e)}}, ensure_ascii=False))
        else:
            sys.stderr.write(f"session-manager data {args.command}: error: {e} (see --help)\n")
        return 2
    except (SessionError, StoreError, DataDirError, OSError) as e:
        code = e.code if isinstance(e, SessionError) else "session/storage" if isinstance(e, StoreError) else None
        message = e.detail if isinstance(e, SessionError) else str(e)
        if args.json:
            print(json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False))
        else:
            sys.stderr.write(f"session-manager data {args.command}: error: {code + ': ' if code else ''}{message}\n")
        return 1
    if args.json and outcome.data is not None:
        print(json.dumps(outcome.data, ensure_ascii=False))
    elif not args.json and outcome.text:
        print(outcome.text)
    sys.stdout.flush()  # a closed pipe surfaces here, inside run's handler, not at interpreter exit
    return int(outcome.code)
