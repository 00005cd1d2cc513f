"""Check a data_dir's files without loading them into a store, and repair torn tails.

Reads the fs layout directly (``<stem>.jsonl`` logs, ``attachments/<stem>/``)
with the store's own record decoder, so it reports exactly what replay would
skip, with line numbers. Errors make the data_dir unhealthy (something a
reader loses or a writer must fix); warnings are crash leftovers the store
already ignores by design.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ...store.fs import INDEX_DIR, SEARCH_DIR, SessionState, committed_records, decode_id, decode_record

LOG_SUFFIX = ".jsonl"
ATTACHMENTS = "attachments"
# Files the stores keep beside the logs that are not sessions (the owner's lock; the index
# sidecars, a cache of the logs' replay that any open rebuilds when it does not match; the search
# index, rebuilt likewise).
HOUSEKEEPING = frozenset({".session-manager.lock", INDEX_DIR, SEARCH_DIR})
# Leftovers of a write or rewrite cut short (temp files are renamed into place when complete).
TEMP_SUFFIXES = (".tmp", ".compact", ".partial")
# A delete cut short leaves its log and folder renamed aside; the next writable open finishes it.
ASIDE = "~deleted"


def leftover_kind(name: str) -> str | None:
    if name.endswith(TEMP_SUFFIXES):
        return "leftover_temp"
    if name.endswith(ASIDE):
        return "interrupted_delete"
    return None

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    severity: Severity
    kind: str
    file: str  # relative to the data_dir
    detail: str
    line: int | None = None
    offset: int | None = None  # torn tails: the byte length to cut back to

    def text(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{self.severity:7}  {where}  {self.kind}: {self.detail}"


@dataclass
class Report:
    data_dir: str
    sessions: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {"data_dir": self.data_dir, "healthy": self.healthy, "sessions": self.sessions,
                "problems": [{k: v for k, v in asdict(p).items() if v is not None} for p in self.problems]}


def attachment_folder(stem: str) -> str:
    """The attachment folder of a log stem (the fs store's rule: "." and ".."
    are escaped, they would name attachments/ itself or the data_dir)."""
    return stem.replace(".", "%2E") if stem in (".", "..") else stem


def log_names(data_dir: Path) -> list[str]:
    return sorted(n for n in os.listdir(data_dir) if n.endswith(LOG_SUFFIX) and (data_dir / n).is_file())


def check_log(data_dir: Path, name: str) -> list[Problem]:
    """Every problem of one session log, in line order."""
    path = data_dir / name
    session_id = decode_id(name[: -len(LOG_SUFFIX)])
    if session_id is None:
        return [Problem("error", "undecodable_name", name, "not an encoded session id; no store reads it")]
    try:
        data = path.read_bytes()
    except OSError as e:
        return [Problem("error", "unreadable", name, str(e))]
    lines = data.split(b"\n")
    problems: list[Problem] = []
    torn_line: int | None = None
    if data and not data.endswith(b"\n"):
        last = lines[-1]
        if decode_record(last, session_id) is None:
            torn_line = len(lines)
            problems.append(Problem("error", "torn_tail", name, f"the last line ({len(last)} bytes) is cut short; "
                                    "fsck --repair cuts it off", line=torn_line, offset=len(data) - len(last)))
        else:
            problems.append(Problem("warning", "unterminated_tail", name,
                                    "the last record has no newline (the next write adds it)", line=len(lines)))

    def skipped(number: int, why: str) -> None:
        if number == torn_line and why.startswith("malformed"):
            return
        if why.startswith("malformed"):
            problems.append(Problem("error", "malformed_line", name, "not a valid record; replay skips it",
                                    line=number))
        else:
            problems.append(Problem("warning", "incomplete_commit", name, why, line=number))

    state = SessionState()
    for record in committed_records(lines, session_id, skipped):
        state.apply_record(record)
    entry_lines = _entry_lines(lines, session_id)
    if state.meta is None:
        problems.append(Problem("error", "no_meta", name, "no session meta: the session is invisible to list and get"))
    if state.leaf is not None and state.leaf not in state.entries:
        problems.append(Problem("error", "dangling_leaf", name, f"the active leaf {state.leaf!r} is no stored entry"))
    for eid, entry in state.entries.items():
        parent = entry.get("parent_id")
        if parent is not None and parent not in state.entries:
            problems.append(Problem("error", "dangling_parent", name,
                                    f"entry {eid!r} has parent {parent!r}, which is no stored entry",
                                    line=entry_lines.get(eid)))
    problems.sort(key=lambda p: (p.line or 0))
    return problems


def _entry_lines(lines: list[bytes], session_id: str) -> dict[str, int]:
    """Where each entry was last written (its newest snapshot's line)."""
    out: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if b'"entry"' not in line:
            continue
        record = decode_record(line, session_id)
        if record is not None and record["type"] in ("entry", "append"):
            out[record["entry"]["id"]] = number
    return out


def check_attachments(data_dir: Path, stems: set[str]) -> list[Problem]:
    """Folders without a session, bytes without metadata, metadata without bytes, leftover temp files."""
    root = data_dir / ATTACHMENTS
    if not root.is_dir():
        return []
    owned = {attachment_folder(s) for s in stems}
    problems: list[Problem] = []
    for folder in sorted(os.listdir(root)):
        where = f"{ATTACHMENTS}/{folder}"
        if folder.endswith(ASIDE):
            problems.append(Problem("warning", "interrupted_delete", where,
                                    "a delete cut short; the next writable open finishes or undoes it"))
            continue
        if folder not in owned:
            count = len(os.listdir(root / folder)) if (root / folder).is_dir() else 0
            problems.append(Problem("warning", "orphaned_attachments", where,
                                    f"no session log owns this folder ({count} files)"))
            continue
        names = set(os.listdir(root / folder))
        for file in sorted(names):
            if file.endswith(TEMP_SUFFIXES):
                problems.append(Problem("warning", "leftover_temp", f"{where}/{file}", "an interrupted write"))
            elif file.endswith(".json") and file[: -len(".json")] + ".bin" not in names:
                problems.append(Problem("error", "attachment_without_bytes", f"{where}/{file}",
                                        "listed, but its bytes are missing"))
            elif file.endswith(".bin") and file[: -len(".bin")] + ".json" not in names:
                problems.append(Problem("warning", "orphaned_bytes", f"{where}/{file}",
                                        "bytes without metadata (an upload cut short); never listed"))
    return problems


def check(data_dir: Path, names: Iterable[str] | None = None) -> Report:
    """The whole data_dir (or the given logs and all attachments)."""
    report = Report(os.fspath(data_dir))
    all_names = log_names(data_dir)
    chosen = all_names if names is None else list(names)
    for name in chosen:
        report.problems.extend(check_log(data_dir, name))
        report.sessions += 1
    report.problems.extend(check_attachments(data_dir, {n[: -len(LOG_SUFFIX)] for n in all_names}))
    for name in sorted(os.listdir(data_dir)):
        if name in HOUSEKEEPING or name == ATTACHMENTS or name.endswith(LOG_SUFFIX):
            continue
        kind = leftover_kind(name)
        detail = {"leftover_temp": "an interrupted write or rewrite; stores skip it",
                  "interrupted_delete": "a delete cut short; the next writable open finishes it"}.get(
            kind or "", "not part of the session layout; stores skip it")
        report.problems.append(Problem("warning", kind or "unexpected_file", name, detail))
    return report


def cut_torn_tails(data_dir: Path, problems: Iterable[Problem]) -> list[Problem]:
    """Truncate each torn tail to its last complete line; the caller holds the data_dir."""
    cut = []
    for problem in problems:
        if problem.kind != "torn_tail" or problem.offset is None:
            continue
        path = data_dir / problem.file
        with path.open("r+b") as f:
            f.truncate(problem.offset)
            f.flush()
            os.fsync(f.fileno())
        cut.append(problem)
    return cut
