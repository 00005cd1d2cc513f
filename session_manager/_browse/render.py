"""Readable text for the terminal: tables, transcripts, branch trees, Markdown."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from .reading import Tree

PREVIEW = 80


def when(ms: Any) -> str:
    """Milliseconds since the epoch as ``YYYY-MM-DD HH:MM:SS`` UTC."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ms)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns; the last column is not padded."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths[:-1], strict=True)]
        return "  ".join([*padded, cells[-1]]).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)])


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 message``, ``2 messages`` (``many``: an irregular plural)."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def one_line(text: str, limit: int = PREVIEW) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def block_text(block: dict[str, Any]) -> str:
    """One content block as plain text (heavy payloads summarized)."""
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "thinking":
        return f"(thinking) {block.get('text', '')}"
    if kind == "redacted_thinking":
        return "(redacted thinking)"
    if kind == "image":
        return f"[image {block.get('mime', '')}{' ' + block['attachment_id'] if block.get('attachment_id') else ''}]"
    if kind == "file":
        return f"[file {block.get('name', '')} ({block.get('mime', '')}, {block.get('size', 0)} bytes)]"
    if kind == "function_call":
        arguments = json.dumps(block.get("arguments"), ensure_ascii=False, sort_keys=True)
        return f"→ {block.get('function_id', '')}({arguments}) [{block.get('id', '')}]"
    if kind == "function_result":
        inner = " ".join(block_text(b) for b in block.get("content") or [] if isinstance(b, dict))
        return f"← [{block.get('function_call_id', '')}] {inner}"
    return f"[{kind} block]"


def item_parts(item: dict[str, Any]) -> tuple[str, str]:
    """(who, text) of a transcript item or stored entry."""
    message = item.get("message")
    if isinstance(message, dict):
        role = str(message.get("role", "?"))
        if role == "function_result":
            role = f"function_result {message.get('function_id', '')}".rstrip()
        if role == "custom":
            role = f"custom {message.get('custom_type', '')}".rstrip()
        text = "\n".join(block_text(b) for b in message.get("content") or [] if isinstance(b, dict))
        return role, text
    custom = item.get("custom")
    if isinstance(custom, dict):
        return f"custom {custom.get('custom_type', '')}", json.dumps(custom.get("data"), ensure_ascii=False)
    if item.get("kind") == "custom":
        return f"custom {item.get('custom_type', '')}", json.dumps(item.get("data"), ensure_ascii=False)
    return "?", ""


def message_count(meta: dict[str, Any], active: int) -> str:
    """The active path's messages (what the transcript shows), and every branch's when they differ."""
    total = meta.get("message_count", 0)
    every = f" ({total} on every branch)" if isinstance(total, int) and total != active else ""
    return plural(active, "message") + every


def session_header(meta: dict[str, Any], active: int) -> str:
    title = meta.get("title") or "(untitled)"
    lines = [f"{title}  [{meta['session_id']}]",
             f"status {meta.get('status')}{' (' + meta['status_reason'] + ')' if meta.get('status_reason') else ''}"
             f" · {message_count(meta, active)} · created {when(meta.get('created_at'))}"
             f" · updated {when(meta.get('updated_at'))}"]
    if meta.get("forked_from"):
        lines.append(f"forked from {meta['forked_from']}")
    if meta.get("description"):
        lines.append(str(meta["description"]))
    if meta.get("metadata"):
        lines.append("metadata " + json.dumps(meta["metadata"], ensure_ascii=False, sort_keys=True))
    return "\n".join(lines)


def transcript(meta: dict[str, Any], items: Sequence[dict[str, Any]], active: int) -> str:
    """The active transcript; ``active``: how many of ``items`` are messages."""
    out = [session_header(meta, active), ""]
    for item in items:
        who, text = item_parts(item)
        out.append(f"── {who} · {item['entry_id']}")
        out.append(text if text else "(empty)")
    if not items:
        out.append("(no messages)")
    return "\n".join(out)


def tree(meta: dict[str, Any], t: Tree) -> str:
    """Every branch, children indented under parents; ``*`` marks the active
    path and ``(leaf)`` the active leaf."""
    active = sum(1 for eid in t.active if t.entries[eid].get("kind") == "message")
    out = [session_header(meta, active), "", "* = active path"]

    def walk(eid: str, prefix: str, last: bool) -> None:
        entry = t.entries[eid]
        who, text = item_parts(entry)
        mark = "*" if eid in t.active else " "
        leaf = " (leaf)" if eid == t.leaf else ""
        joint = "└─ " if last else "├─ "
        out.append(f"{mark} {prefix}{joint}{eid} {who}: {one_line(text)}{leaf}")
        kids = t.children.get(eid, [])
        for i, kid in enumerate(kids):
            walk(kid, prefix + ("   " if last else "│  "), i == len(kids) - 1)

    roots = t.children.get(None, [])
    for i, root in enumerate(roots):
        walk(root, "", i == len(roots) - 1)
    if not roots:
        out.append("(no entries)")
    return "\n".join(out)


def _markdown_head(meta: dict[str, Any]) -> list[str]:
    out = [f"# {meta.get('title') or meta['session_id']}", "",
           f"- session: `{meta['session_id']}`",
           f"- status: {meta.get('status')}",
           f"- created: {when(meta.get('created_at'))} UTC", f"- updated: {when(meta.get('updated_at'))} UTC"]
    if meta.get("description"):
        out += ["", str(meta["description"])]
    return out


def markdown(meta: dict[str, Any], items: Sequence[dict[str, Any]]) -> str:
    """The active transcript as a Markdown document."""
    out = _markdown_head(meta)
    for item in items:
        who, text = item_parts(item)
        out += ["", f"## {who}", "", text if text else "_(empty)_"]
    return "\n".join(out) + "\n"


def markdown_branches(meta: dict[str, Any], t: Tree) -> str:
    """Every branch as a Markdown document (``export --markdown --all-branches``): the active
    transcript first, then each other branch from where it leaves the branch it grew on (its
    entries down its newest path; branches of branches after it, the same way)."""
    out = _markdown_head(meta)
    pending: list[tuple[str, str | None]] = []  # (first entry of a branch, the entry it branches after)

    def chain(group: list[str]) -> None:
        while group:
            main = next((g for g in group if g in t.active), group[-1])
            parent = t.entries[main].get("parent_id")
            pending.extend((other, parent if parent in t.entries else None) for other in group if other != main)
            who, text = item_parts(t.entries[main])
            out.extend(["", f"## {who} · `{main}`", "", text if text else "_(empty)_"])
            group = t.children.get(main, [])

    chain(t.children.get(None, []))
    number = 0
    while pending:
        first, after = pending.pop(0)
        number += 1
        where = f"after `{after}`" if after is not None else "at the start"
        out.extend(["", "---", "", f"**Other branch {number}**, {where}:"])
        chain([first])
    return "\n".join(out) + "\n"
