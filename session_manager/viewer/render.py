"""HTML of the viewer's pages and of ``data export --html``: one rendering for both.

Every piece of stored text (titles, messages, metadata, file names, ids) goes
through :func:`html.escape` here and nowhere is placed inside an executable
script: the page's data for its script is a ``<script type="application/json">``
block whose ``<``, ``>`` and ``&`` are JSON escapes. A conversation is rendered as
its active path read as a chat; where the tree branches, each alternative sits
right before the entry it is an alternative to, as a collapsed ``<details>``
holding that whole branch (nested the same way), so every branch is in the
page and readable without JavaScript.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import quote

from .._browse.reading import Tree
from .._browse.render import item_parts, one_line, when

# Images a page shows inline; anything else (SVG included: it can carry script) is a download.
INLINE_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp"})
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
STATUSES = ("idle", "working", "done", "error")

AttachmentUrl = Callable[[str], "str | None"]


def e(value: Any) -> str:
    """Escaped text of any value (quotes too: safe in attributes)."""
    return escape("" if value is None else str(value), quote=True)


def session_href(session_id: str) -> str:
    """A session page's URL, escaped for an attribute: the id is one path segment whatever it holds
    (an imported id may carry ``/``, ``?``, ``#``, ``%`` or spaces)."""
    return e("/sessions/" + quote(session_id, safe=""))


def fragment(element_id: str) -> str:
    """An in-page link to ``element_id``, escaped for an attribute (the browser matches the
    percent-decoded fragment against the element's id)."""
    return e("#" + quote(element_id, safe=""))


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def script_data(value: Any, element_id: str) -> str:
    """Data for the page's script: inert JSON whose text cannot close the element."""
    raw = json.dumps(value, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f'<script type="application/json" id="{e(element_id)}">{raw}</script>'


@dataclass
class Assets:
    """How a page reaches its style and script: linked (served) or inline (export)."""

    css: str = ""  # inline CSS (export); empty: link ``static``
    static: str = "/static"
    script: bool = True  # link the live-update script (the export has none)
    csp: str | None = None  # a <meta> Content-Security-Policy (export: the file has no headers)


def page(title: str, body: str, assets: Assets, *, kind: str, data: dict[str, Any] | None = None) -> str:
    head = ['<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{e(title)}</title>"]
    if assets.csp:
        head.insert(1, f'<meta http-equiv="Content-Security-Policy" content="{e(assets.csp)}">')
    head.append(f"<style>{assets.css}</style>" if assets.css
                else f'<link rel="stylesheet" href="{e(assets.static)}/viewer.css">')
    tail = script_data({"page": kind, **(data or {})}, "viewer-data")
    if assets.script:
        tail += f'<script src="{e(assets.static)}/viewer.js" defer></script>'
    home = ('<a class="brand" href="/">session-manager</a>' if assets.script
            else '<span class="brand">session-manager</span>')
    live = '<span id="live" class="live" title="live updates">offline</span>' if assets.script else ""
    return (f'<!doctype html><html lang="en"><head>{"".join(head)}</head><body class="page-{e(kind)}">'
            f'<header class="top">{home}{live}</header><main>{body}</main>{tail}</body></html>\n')


# -- the session list ----------------------------------------------------------------------------------


def session_rows(metas: Sequence[dict[str, Any]]) -> str:
    if not metas:
        return '<tr class="empty"><td colspan="6">no sessions</td></tr>'
    rows = []
    for m in metas:
        sid = m["session_id"]
        forked = (f'<a href="{session_href(m["forked_from"])}">{e(m["forked_from"])}</a>'
                  if m.get("forked_from") else "")
        metadata = f"<code>{e(json_text(m['metadata']))}</code>" if m.get("metadata") else ""
        rows.append(
            f'<tr data-session-id="{e(sid)}"><td class="title"><a href="{session_href(sid)}">'
            f'{e(m.get("title") or "(untitled)")}</a><div class="sid">{e(sid)}</div></td>'
            f'<td><span class="status status-{e(m.get("status"))}">{e(m.get("status"))}</span></td>'
            f'<td class="num">{e(m.get("message_count", 0))}</td>'
            f'<td class="when">{e(when(m.get("updated_at")))}</td><td class="metadata">{metadata}</td>'
            f'<td class="forked">{forked}</td></tr>')
    return "".join(rows)


@dataclass
class ListView:
    """What the list page shows: a page of metas and the filters that chose it."""

    metas: list[dict[str, Any]]
    status: str | None = None
    meta: list[str] = field(default_factory=list)
    next_query: str | None = None  # the query string of the next page
    first_query: str | None = None  # the first page's, when this is not it
    search: bool = False  # a session::search box (the hook: shown only where that function exists)
    query: str | None = None  # the search box's words, when the page answers them
    hits: list[dict[str, Any]] | None = None  # session::search hits, shown instead of the sessions


def hit_rows(hits: list[dict[str, Any]]) -> str:
    rows = []
    for h in hits:
        sid = h["session_id"]
        branch = "active path" if h.get("on_active_path") else "other branch"
        rows.append(f'<tr><td><a href="{session_href(sid)}">{e(sid)}</a></td><td>{e(h.get("role"))}</td>'
                    f'<td class="snippet">{e(h.get("snippet"))}</td><td class="num">{e(h.get("score"))}</td>'
                    f'<td class="when">{e(when(h.get("timestamp")))}</td><td>{branch}</td></tr>')
    return "".join(rows)


def list_body(view: ListView) -> str:
    options = "".join(f'<option value="{s}"{" selected" if view.status == s else ""}>{s}</option>'
                      for s in STATUSES)
    search = (f'<label>search <input type="search" name="q" value="{e(view.query or "")}"></label>'
              if view.search else "")
    pager = []
    if view.first_query is not None:
        pager.append(f'<a href="/?{e(view.first_query)}">« first page</a>')
    if view.next_query is not None:
        pager.append(f'<a href="/?{e(view.next_query)}" rel="next">next page »</a>')
    return (
        '<h1>Sessions</h1><form class="filters" method="get" action="/">'
        f'<label>status <select name="status"><option value="">any</option>{options}</select></label>'
        f'<label>metadata <input name="meta" placeholder="key=value" value="{e(" ".join(view.meta))}"></label>'
        f'{search}<button type="submit">filter</button></form>'
        f'{_results(view)}<nav class="pager">{"".join(pager)}</nav>')


def _results(view: ListView) -> str:
    if view.hits is not None:
        return ('<table class="hits"><thead><tr><th>session</th><th>role</th><th>snippet</th><th>score</th>'
                '<th>when (UTC)</th><th>branch</th></tr></thead>'
                f'<tbody>{hit_rows(view.hits)}</tbody></table>')
    return ('<table class="sessions"><thead><tr><th>title</th><th>status</th><th>messages</th>'
            '<th>updated (UTC)</th><th>metadata</th><th>forked from</th></tr></thead>'
            f'<tbody id="live-region">{session_rows(view.metas)}</tbody></table>')


# -- one session ----------------------------------------------------------------------------------------


@dataclass
class SessionView:
    """Everything a session page shows."""

    meta: dict[str, Any]
    tree: Tree
    forks: list[dict[str, Any]] = field(default_factory=list)  # sessions forked from this one
    attachment_url: AttachmentUrl = lambda _aid: None
    link_sessions: bool = True  # the export has no other pages to link to
    all_branches: bool = True  # False (``export --html --active-path``): the alternatives left out

    def results(self) -> dict[str, str]:
        """function_call id -> the entry holding its result (calls and results are paired by id)."""
        out: dict[str, str] = {}
        for eid, entry in self.tree.entries.items():
            message = entry.get("message") or {}
            if message.get("role") == "function_result" and message.get("function_call_id"):
                out.setdefault(str(message["function_call_id"]), eid)
            for block in message.get("content") or []:
                if isinstance(block, dict) and block.get("type") == "function_result":
                    out.setdefault(str(block.get("function_call_id")), eid)
        return out


def _session_link(view: SessionView, sid: str) -> str:
    return f'<a href="{session_href(sid)}">{e(sid)}</a>' if view.link_sessions else f"<code>{e(sid)}</code>"


def session_header(view: SessionView) -> str:
    m = view.meta
    facts = [f'<span class="status status-{e(m.get("status"))}">{e(m.get("status"))}</span>',
             f'{e(m.get("message_count", 0))} messages', f'created {e(when(m.get("created_at")))}',
             f'updated {e(when(m.get("updated_at")))} UTC']
    if m.get("status_reason"):
        facts.insert(1, e(m["status_reason"]))
    rows = [f'<h1>{e(m.get("title") or "(untitled)")}</h1>', f'<div class="sid">{e(m["session_id"])}</div>',
            f'<div class="facts">{" · ".join(facts)}</div>']
    if m.get("description"):
        rows.append(f'<p class="description">{e(m["description"])}</p>')
    if m.get("metadata"):
        rows.append(f'<div class="metadata">metadata <code>{e(json_text(m["metadata"]))}</code></div>')
    if m.get("forked_from"):
        rows.append(f'<div class="fork">forked from {_session_link(view, m["forked_from"])}</div>')
    if view.forks:
        links = ", ".join(_session_link(view, f["session_id"]) for f in view.forks)
        rows.append(f'<div class="fork">forks: {links}</div>')
    return f'<section class="meta" id="meta">{"".join(rows)}</section>'


def session_body(view: SessionView) -> str:
    return (f'<div id="live-region">{session_header(view)}'
            f'<section class="chat" id="conversation">{conversation(view)}</section></div>')


def conversation(view: SessionView) -> str:
    t = view.tree
    roots = t.children.get(None, [])
    if not roots:
        return '<p class="muted">no entries</p>'
    out: list[str] = []
    _chain(view, roots, out, view.results())
    return "".join(out)


def _chain(view: SessionView, group: list[str], out: list[str], results: dict[str, str]) -> None:
    """From a group of siblings down: the one on the active path (else the newest) as the chat,
    the others as collapsed alternatives before it."""
    t = view.tree
    while group:
        main = next((g for g in group if g in t.active), group[-1])
        others = [g for g in group if g != main] if view.all_branches else []
        if others:
            out.append(f'<div class="branch"><div class="branch-label">{len(others) + 1} branches here'
                       f'{" · shown: the active one" if main in t.active else ""}</div>')
            for other in others:
                _who, text = _preview(t.entries[other])
                out.append(f'<details class="alt" id="alt-{e(other)}"><summary>alternative: '
                           f'{e(one_line(text, 70) or _who)}</summary><div class="alt-body">')
                _chain(view, [other], out, results)
                out.append("</div></details>")
            out.append("</div>")
        out.append(entry_html(view, t.entries[main], results))
        group = t.children.get(main, [])


def _preview(entry: dict[str, Any]) -> tuple[str, str]:
    """(who, plain text) of an entry, as ``data show`` prints it."""
    return item_parts(entry)


def entry_html(view: SessionView, entry: dict[str, Any], results: dict[str, str]) -> str:
    eid = entry["id"]
    t = view.tree
    classes = ["msg"]
    message = entry.get("message")
    if isinstance(message, dict):
        role = str(message.get("role", "?"))
        label = role if role != "custom" else f"custom {message.get('custom_type', '')}"
        if role == "function_result":
            label = f"result of {message.get('function_id', '')}"
        body = _blocks(view, message.get("content") or [], results)
        extra = _message_extra(message)
    else:
        role, label = "custom", f"custom {entry.get('custom_type', '')}"
        body = f'<pre class="data">{e(json.dumps(entry.get("data"), ensure_ascii=False, indent=2))}</pre>'
        extra = ""
    classes.append(f"role-{role}")
    if eid in t.active:
        classes.append("active")
    if eid == t.leaf:
        classes.append("leaf")
    origin = entry.get("origin")
    hover = f' title="origin {e(json_text(origin))}"' if origin else ""
    revision = f' · rev {e(entry["revision"])}' if entry.get("revision") else ""
    leaf = ' · <span class="leaf-mark">active leaf</span>' if eid == t.leaf else ""
    return (f'<article class="{e(" ".join(classes))}" id="e-{e(eid)}" data-entry-id="{e(eid)}"{hover}>'
            f'<header><span class="role">{e(label)}</span><span class="when">{e(when(entry.get("timestamp")))}'
            f'</span><span class="eid">{e(eid)}{revision}{leaf}</span></header>'
            f'<div class="content">{body}</div>{extra}</article>')


def _message_extra(message: dict[str, Any]) -> str:
    bits = []
    if message.get("role") == "function_result":
        cid = message.get("function_call_id", "")
        bits.append(f'<a class="pair" href="{fragment("call-" + str(cid))}">↑ the call {e(cid)}</a>')
        if message.get("is_error"):
            bits.append('<span class="error">error</span>')
    if message.get("role") == "assistant":
        model = " / ".join(str(message[k]) for k in ("provider", "model") if message.get(k))
        bits.append(e(f"{model} · {message.get('stop_reason', '')}"))
        if message.get("error_message"):
            bits.append(f'<span class="error">{e(message["error_message"])}</span>')
    return f'<footer>{" · ".join(bits)}</footer>' if bits else ""


def _blocks(view: SessionView, blocks: Sequence[Any], results: dict[str, str]) -> str:
    return "".join(_block(view, b, results) for b in blocks if isinstance(b, dict))


def _block(view: SessionView, block: dict[str, Any], results: dict[str, str]) -> str:
    kind = block.get("type")
    if kind == "text":
        return f'<div class="text">{e(block.get("text", ""))}</div>'
    if kind == "thinking":
        return (f'<details class="thinking"><summary>thinking</summary>'
                f'<div class="text">{e(block.get("text", ""))}</div></details>')
    if kind == "redacted_thinking":
        return '<div class="muted">(redacted thinking)</div>'
    if kind == "image":
        return _image(view, block)
    if kind == "file":
        return _file(view, block)
    if kind == "function_call":
        return _call(view, block, results)
    if kind == "function_result":
        cid = block.get("function_call_id", "")
        return (f'<div class="result" id="result-{e(cid)}"><a class="pair" href="{fragment("call-" + str(cid))}">'
                f'← result of {e(cid)}</a>{_blocks(view, block.get("content") or [], results)}</div>')
    return f'<div class="muted">[{e(kind)} block]</div>'


def _image(view: SessionView, block: dict[str, Any]) -> str:
    mime = str(block.get("mime", ""))
    data = block.get("data") or ""
    src: str | None = None
    if mime in INLINE_IMAGES and isinstance(data, str) and data and _BASE64.fullmatch(data):
        src = f"data:{mime};base64,{''.join(data.split())}"
    elif block.get("attachment_id") and mime in INLINE_IMAGES:
        src = view.attachment_url(str(block["attachment_id"]))
    if src is None:
        return f'<div class="muted">[image {e(mime)} {e(block.get("attachment_id") or "")}]</div>'
    return f'<figure class="image"><img src="{e(src)}" alt="image {e(mime)}"></figure>'


def _file(view: SessionView, block: dict[str, Any]) -> str:
    name = str(block.get("name", ""))
    url = view.attachment_url(str(block.get("attachment_id", "")))
    label = f'{e(name)} <span class="muted">({e(block.get("mime", ""))}, {e(block.get("size", 0))} bytes)</span>'
    if url is None:
        return f'<div class="file">📎 {label}</div>'
    return f'<div class="file">📎 <a href="{e(url)}" download="{e(name)}">{label}</a></div>'


def _call(view: SessionView, block: dict[str, Any], results: dict[str, str]) -> str:
    cid = str(block.get("id", ""))
    arguments = json.dumps(block.get("arguments"), ensure_ascii=False, indent=2)
    paired = ""
    result_id = results.get(cid)
    if result_id is not None:
        _who, text = _preview(view.tree.entries[result_id])
        paired = (f'<details class="paired"><summary>result '
                  f'<a class="pair" href="{fragment("e-" + result_id)}">↓</a></summary>'
                  f'<div class="text">{e(text)}</div></details>')
    else:
        paired = '<div class="muted">no result yet</div>'
    return (f'<div class="call" id="call-{e(cid)}"><div class="call-head">→ <code>{e(block.get("function_id", ""))}'
            f'</code> <span class="muted">{e(cid)}</span></div><pre class="args">{e(arguments)}</pre>{paired}</div>')


__all__ = ["Assets", "ListView", "SessionView", "e", "list_body", "page", "script_data", "session_body",
           "session_rows"]
