"""The viewer at the HTTP level: every route's JSON against the embedded API's answers, the pages'
escaping, 404s, the Host and token rules, and the SSE stream (each event once, in order per session).

Each test names the regression it prevents; the browser-level checks are in test_viewer_browser.py."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

import session_manager
from session_manager._wire.events import EVENT_FUNCTIONS
from session_manager.viewer.app import create_app
from session_manager.viewer.guard import CSP, BindRefused
from tests.unit.viewer_support import assistant, branched_session, running, text, user

BASE = "http://127.0.0.1:8765"


@pytest.fixture
def data(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        ids = branched_session(sm)
        for i in range(3):
            sm.call("session::create", {"title": f"extra {i}", "metadata": {"user": "u_2", "n": i}})
        sm.call("session::set-status", {"session_id": ids["fork"], "status": "working"})
    return d, ids


@pytest.fixture
def client(data: tuple[Path, dict[str, str]]) -> Iterator[tuple[TestClient, session_manager.SessionManager]]:
    with session_manager.open(data[0], read_only=True) as sm:
        yield TestClient(create_app(sm), base_url=BASE), sm


def test_api_sessions_is_the_list_response_for_every_filter_and_page(client: Any) -> None:
    """Regression: the API re-shaping or dropping session::list's answer (cursor, filters)."""
    c, sm = client
    for params, request in [({}, {}), ({"status": "working"}, {"status": "working"}),
                            ({"meta": "user=u_2"}, {"metadata": {"user": "u_2"}}),
                            ({"meta": "user=u_2 n=1"}, {"metadata": {"user": "u_2", "n": 1}}),
                            ({"order": "created_asc", "limit": "2"}, {"order": "created_asc", "limit": 2})]:
        r = c.get("/api/sessions", params=params)
        assert r.status_code == 200
        assert r.json() == sm.call("session::list", request), params
    first = sm.call("session::list", {"limit": 2})
    r = c.get("/api/sessions", params={"limit": "2", "cursor": first["next_cursor"]})
    assert r.json() == sm.call("session::list", {"limit": 2, "cursor": first["next_cursor"]})
    bad = c.get("/api/sessions", params={"status": "nope"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "session/invalid_request"
    assert "status" in bad.json()["error"]["message"]


def test_api_session_holds_every_branch_and_the_active_leaf(client: Any, data: Any) -> None:
    """Regression: only the active path served (the alternative answer missing) or a wrong leaf."""
    c, sm = client
    ids = data[1]
    body = c.get(f"/api/sessions/{ids['sid']}").json()
    assert set(body) == {"meta", "active_leaf", "entries"}
    assert body["meta"] == sm.call("session::get", {"session_id": ids["sid"]})["meta"]
    store_entries = sm.service.store.entries(ids["sid"])
    assert sorted(body["entries"], key=lambda x: x["id"]) == sorted(store_entries, key=lambda x: x["id"])
    assert ids["alternative"] in {x["id"] for x in body["entries"]}
    by_id = {x["id"]: x for x in body["entries"]}
    path, at = [], body["active_leaf"]
    while at is not None:
        path.append(at)
        at = by_id[at].get("parent_id")
    transcript = sm.call("session::messages", {"session_id": ids["sid"], "include_custom": True})["messages"]
    assert path[::-1] == [m["entry_id"] for m in transcript]
    assert body["active_leaf"] == ids["final"]


def test_unknown_session_is_404_on_page_api_and_attachment(client: Any) -> None:
    c, _ = client
    r = c.get("/api/sessions/s_nope")
    assert r.status_code == 404
    assert r.json() == {"error": {"code": "session/not_found", "message": "session s_nope does not exist"}}
    page = c.get("/sessions/s_nope")
    assert page.status_code == 404 and "s_nope" in page.text
    assert c.get("/sessions/s_nope/attachments/a_1").status_code == 404


def test_pages_render_on_the_server_and_escape_everything(tmp_path: Path) -> None:
    """Regression: stored text reaching the HTML unescaped (a <script> title or message running)."""
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    with session_manager.open(tmp_path / "d") as sm:
        sid = sm.call("session::create", {"title": evil, "metadata": {evil: evil}})["session_id"]
        sm.call("session::append", {"session_id": sid, "message": user(evil)})
        sm.call("session::append", {"session_id": sid, "message": assistant(
            {"type": "file", "attachment_id": "a_x", "name": evil, "mime": "text/html", "size": 3})})
    with session_manager.open(tmp_path / "d", read_only=True) as sm:
        c = TestClient(create_app(sm), base_url=BASE)
        for url in ("/", f"/sessions/{sid}"):
            r = c.get(url)
            assert r.status_code == 200
            assert r.headers["content-security-policy"] == CSP
            assert "<script>alert" not in r.text and "<img src=x" not in r.text
            assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in r.text
            # the only scripts: the inert JSON data block and the package's own file
            assert r.text.count("<script") == 2
            assert '<script type="application/json" id="viewer-data">' in r.text
            assert '<script src="/static/viewer.js" defer></script>' in r.text


def test_session_page_shows_active_path_alternative_fork_and_pairs(client: Any, data: Any) -> None:
    c, _ = client
    ids = data[1]
    html = c.get(f"/sessions/{ids['sid']}").text
    assert "Take an umbrella." in html and "Probably not; the first answer." in html
    assert f'id="alt-{ids["alternative"]}"' in html  # the alternative, collapsed where it branches
    assert f'href="/sessions/{ids["fork"]}"' in html  # its fork, linked
    assert 'id="call-call_1"' in html and f'href="#e-{ids["result"]}"' in html  # call -> result
    assert 'href="#call-call_1"' in html  # result -> call
    assert 'title="origin {&quot;worker&quot;: &quot;weather&quot;}"' in html
    assert '<details class="thinking">' in html and 'src="data:image/png;base64,' in html
    fork_page = c.get(f"/sessions/{ids['fork']}").text
    assert f'href="/sessions/{ids["sid"]}"' in fork_page  # and back


def test_loopback_refuses_foreign_host_headers(client: Any) -> None:
    """Regression: DNS rebinding (a page on evil.example resolved to 127.0.0.1) reading the viewer."""
    c, _ = client
    for host in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example"):
        for path in ("/", "/api/sessions", "/api/events"):
            r = c.get(path, headers={"host": host})
            assert r.status_code == 403, (host, path)
    for host in ("127.0.0.1:8765", "localhost:8765", "localhost", "[::1]:8765"):
        assert c.get("/api/sessions", headers={"host": host}).status_code == 200, host


def test_non_loopback_bind_needs_a_token(tmp_path: Path) -> None:
    """Regression: the viewer serving a network address to anyone."""
    with session_manager.open(tmp_path / "d") as sm:
        for host in ("0.0.0.0", "192.168.1.5", "::"):
            with pytest.raises(BindRefused, match="token"):
                create_app(sm, host=host)
    (tmp_path / "e").mkdir()
    done = subprocess.run([sys.executable, "-m", "session_manager", "data", "serve", str(tmp_path / "e"),
                           "--host", "0.0.0.0", "--token", ""], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "needs an access token" in done.stderr
    assert not any((tmp_path / "e").iterdir())  # refused before opening anything


def test_token_is_checked_on_every_route(tmp_path: Path) -> None:
    """Regression: a route (the API, the SSE stream, the static files) reachable without the token."""
    with session_manager.open(tmp_path / "d") as sm:
        sid = sm.call("session::create", {"title": "t"})["session_id"]
    with session_manager.open(tmp_path / "d", read_only=True) as sm:
        c = TestClient(create_app(sm, host="0.0.0.0", token="s3cret"), base_url="http://10.0.0.2:8765")
        paths = ["/", f"/sessions/{sid}", "/api/sessions", f"/api/sessions/{sid}", "/api/events",
                 "/static/viewer.js"]
        for path in paths:
            assert c.get(path).status_code == 401, path
            assert c.get(path, headers={"authorization": "Bearer wrong"}).status_code == 401, path
            assert c.get(path, params={"token": "nope"}).status_code == 401, path
        for path in paths[:4]:
            assert c.get(path, headers={"authorization": "Bearer s3cret"}).status_code == 200, path
        first = c.get("/", params={"token": "s3cret"})
        assert first.status_code == 200
        assert "session_manager_viewer=s3cret" in first.headers["set-cookie"]
        assert "HttpOnly" in first.headers["set-cookie"] and "SameSite=Strict" in first.headers["set-cookie"]
        assert c.get(f"/api/sessions/{sid}").status_code == 200  # the cookie the first visit set
        assert first.headers["referrer-policy"] == "no-referrer"


# -- SSE ----------------------------------------------------------------------------------------------


def _sse(base: str, path: str, into: queue.Queue[tuple[str, Any]], stop: threading.Event) -> None:
    try:
        _read_sse(base, path, into, stop)
    except httpx.HTTPError:
        if not stop.is_set():
            raise


def _read_sse(base: str, path: str, into: queue.Queue[tuple[str, Any]], stop: threading.Event) -> None:
    with httpx.Client(timeout=None) as http, http.stream("GET", base + path) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in r.iter_lines():
            if stop.is_set():
                return
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                into.put((str(event), json.loads(line[6:])))
            elif line == ": connected":
                into.put(("connected", None))


def _listen(base: str, path: str) -> tuple[queue.Queue[tuple[str, Any]], threading.Event]:
    got: queue.Queue[tuple[str, Any]] = queue.Queue()
    stop = threading.Event()
    threading.Thread(target=_sse, args=(base, path, got, stop), daemon=True).start()
    assert got.get(timeout=20) == ("connected", None)
    return got, stop


def test_sse_delivers_each_event_once_in_order_as_an_observer_gets_it(tmp_path: Path) -> None:
    """Regression: events lost, doubled, reordered or reshaped between the store and the browser.
    The viewer follows a live writer's data_dir read-only; each mutation's event must arrive (the
    writer's own in-process observer is the expected payload) before the next one is made."""
    d = tmp_path / "d"
    with session_manager.open(d) as writer, session_manager.open(d, read_only=True) as viewer_sm, \
            running(viewer_sm) as base:
        own: queue.Queue[tuple[str, Any]] = queue.Queue()
        for fid in EVENT_FUNCTIONS:
            writer.observe({"function_id": fid}, lambda ev, fid=fid: own.put((fid, ev)))
        everything, stop_all = _listen(base, "/api/events")
        a = writer.call("session::create", {"title": "a"})["session_id"]
        b = writer.call("session::create", {"title": "b"})["session_id"]
        expected = [own.get_nowait(), own.get_nowait()]
        got = [everything.get(timeout=10), everything.get(timeout=10)]
        assert sorted(got, key=lambda x: x[1]["session_id"]) == sorted(expected, key=lambda x: x[1]["session_id"])
        one, stop_one = _listen(base, f"/api/events?session_id={a}")
        steps = [
            lambda: writer.call("session::append", {"session_id": a, "message": user("hi")}),
            lambda: writer.call("session::append", {"session_id": b, "message": assistant(text(""))}),
            lambda: writer.call("session::set-status", {"session_id": a, "status": "working"}),
            lambda: writer.call("session::set-meta", {"session_id": a, "title": "a2"}),
            lambda: writer.call("session::delete", {"session_id": b}),
        ]
        seen_a = []
        for step in steps:
            step()
            want = own.get_nowait()
            arrived = everything.get(timeout=10)
            if arrived[0] == "session::on-deleted":  # stamped when the follower saw it
                want[1]["timestamp"] = arrived[1]["timestamp"]
            assert arrived == want
            if want[1]["session_id"] == a:
                seen_a.append(one.get(timeout=10))
                assert seen_a[-1] == want
        time.sleep(1.0)
        assert everything.empty() and one.empty()  # once each, nothing of b on a's stream
        assert [f for f, _ in seen_a] == ["session::on-message-added", "session::on-status-changed",
                                          "session::on-meta-updated"]
        stop_all.set()  # (the server's shutdown ends both streams)
        stop_one.set()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _first_answer(url: str) -> httpx.Response:
    """GET ``url`` once the server listens (a fresh process takes a moment to bind)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return httpx.get(url, timeout=5)
        except httpx.ConnectError:
            assert time.monotonic() < deadline, "data serve did not answer"
            time.sleep(0.1)


def _serve(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "session_manager", "data", "serve", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_data_serve_runs_read_only_beside_the_owner_and_stops_on_sigint(data: Any) -> None:
    """Regression: `data serve` taking the owner lock (failing beside a live writer) or not answering."""
    import signal

    d, ids = data
    port = _free_port()
    with session_manager.open(d) as owner:  # a live writer holds the data_dir
        proc = _serve([str(d), "--port", str(port)])
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            assert line.strip().endswith(f"(read-only) at http://127.0.0.1:{port}/")
            r = _first_answer(f"http://127.0.0.1:{port}/api/sessions/{ids['sid']}")
            assert r.status_code == 200
            assert r.json()["meta"] == owner.call("session::get", {"session_id": ids["sid"]})["meta"]
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
    assert proc.returncode in (0, -signal.SIGINT, 130)


def test_data_serve_beyond_loopback_prints_a_generated_token(tmp_path: Path) -> None:
    import signal

    (tmp_path / "d").mkdir()
    port = _free_port()
    proc = _serve([str(tmp_path / "d"), "--host", "0.0.0.0", "--port", str(port)])
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        token = line.strip().rsplit("?token=", 1)[1]
        assert len(token) >= 24
        bare = _first_answer(f"http://127.0.0.1:{port}/api/sessions")
        assert bare.status_code == 401
        ok = httpx.get(f"http://127.0.0.1:{port}/api/sessions", headers={"authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and ok.json()["sessions"] == []
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_export_html_refuses_bad_combinations(data: Any) -> None:
    d, ids = data
    for extra, message, code in ([[ids["sid"], "--html", "--markdown"], "choose one format", 2],
                                 [["--html"], "name exactly one SESSION", 2],  # usage errors exit 2
                                 [["s_nope", "--html"], "session s_nope does not exist", 1]):
        done = subprocess.run([sys.executable, "-m", "session_manager", "data", "export", str(d), *extra],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == code and message in done.stderr, (extra, done.stderr)
        assert done.stdout == ""


def test_list_page_filters_and_pages_like_session_list(client: Any, data: Any) -> None:
    """Regression: the page's filters or pager showing other rows than session::list chose."""
    c, sm = client
    ids = data[1]

    def rows(html: str) -> list[str]:
        import re

        return re.findall(r'<tr data-session-id="([^"]+)"', html)

    assert rows(c.get("/", params={"status": "working"}).text) == [ids["fork"]]
    want = [m["session_id"] for m in sm.call("session::list", {"metadata": {"user": "u_2"}})["sessions"]]
    assert rows(c.get("/", params={"meta": "user=u_2"}).text) == want and len(want) == 3
    first = c.get("/", params={"limit": "2"}).text
    page1 = sm.call("session::list", {"limit": 2})
    assert rows(first) == [m["session_id"] for m in page1["sessions"]]
    assert 'rel="next"' in first and "first page" not in first
    second = c.get("/", params={"limit": "2", "cursor": page1["next_cursor"]}).text
    page2 = sm.call("session::list", {"limit": 2, "cursor": page1["next_cursor"]})
    assert rows(second) == [m["session_id"] for m in page2["sessions"]] and "first page" in second
    fragment = c.get("/", params={"status": "working"}, headers={"x-viewer-fragment": "1"}).text
    assert fragment.startswith("<tr") and "<html" not in fragment  # what the live script swaps in
    assert c.get("/", params={"status": "bogus"}).status_code == 400


def test_list_page_search_box_shows_session_search_hits(client: Any, data: Any) -> None:
    """Regression: the search box missing now that session::search exists, showing other hits than
    session::search answers (filter, order, branch), or a snippet unescaped."""
    import re

    c, sm = client
    page = c.get("/").text
    assert 'type="search" name="q"' in page
    html = c.get("/", params={"q": "paris", "meta": "user=u_1"}).text
    want = sm.call("session::search", {"query": "paris", "metadata": {"user": "u_1"}, "limit": 50})["hits"]
    assert len(want) >= 2  # the question in its session and in the fork
    got = re.findall(r'<tr><td><a href="/sessions/([^"]+)">', html)
    assert got == [h["session_id"] for h in want]
    assert 'value="paris"' in html and "Will it rain in Paris tomorrow?" in html
    assert "other branch" in c.get("/", params={"q": "probably"}).text  # the alternative answer
    assert c.get("/", params={"q": "nothing-matches-zz"}).text.count("<tr><td>") == 0
    escaped = c.get("/", params={"q": "<b>x"}).text
    assert "<b>x" not in escaped and "&lt;b&gt;x" in escaped


def test_export_all_branches_is_the_html_default_and_active_path_leaves_the_alternatives_out(
        data: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: `--all-branches` (the issue's default for HTML) not accepted, an HTML export that
    drops a branch by default, or a Markdown export that cannot carry the other branches."""
    from session_manager._cli.data import main

    d, ids = data

    def export(*flags: str) -> str:
        code = main(["export", str(d), ids["sid"], *flags])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    alternative = "Probably not; the first answer."
    html = export("--html")
    assert export("--html", "--all-branches") == html  # the default, spelled out
    assert alternative in html and f'id="alt-{ids["alternative"]}"' in html
    active = export("--html", "--active-path")
    assert alternative not in active and "Take an umbrella." in active and 'id="alt-' not in active
    assert alternative not in export("--markdown")  # Markdown: the active transcript by default
    every = export("--markdown", "--all-branches")
    assert every.index("Take an umbrella.") < every.index("**Other branch 1**, after `" + ids["question"] + "`:") \
        < every.index(alternative)
    assert every.count("\n## ") == 5 and export("--markdown", "--active-path") == export("--markdown")
    assert main(["export", str(d), ids["sid"], "--active-path"]) == 2
    assert "a JSON Lines export carries every branch" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:  # (argparse's own refusal: exit 2)
        main(["export", str(d), ids["sid"], "--html", "--all-branches", "--active-path"])
    assert exited.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert main(["export", str(d), ids["sid"], "--all-branches"]) == 0  # JSON Lines: every branch already
    assert ids["alternative"] in capsys.readouterr().out


ODD_ID = "s/x?y#z &w%41"  # any non-empty string is an id; an import brings such ones


def test_a_session_id_with_url_characters_is_linked_and_served_whole(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: a link `/sessions/s/x?y#z …` (the id put into the URL unencoded) leading to a 404
    or to another session, and a route that cannot take an id holding "/"."""
    import re
    from urllib.parse import unquote

    from session_manager._cli.data import main

    src, dst = tmp_path / "src", tmp_path / "dst"
    with session_manager.open(src) as sm:
        sid = sm.call("session::create", {"title": "odd"})["session_id"]
        sm.call("session::append", {"session_id": sid, "message": user("hello")})
    assert main(["export", str(src), sid]) == 0
    doc = json.loads(capsys.readouterr().out)
    doc["meta"]["session_id"] = ODD_ID
    (tmp_path / "odd.jsonl").write_text(json.dumps(doc) + "\n", encoding="utf-8")
    assert main(["import", str(dst), str(tmp_path / "odd.jsonl")]) == 0
    with session_manager.open(dst) as sm:
        leaf = sm.service.store.get_leaf(ODD_ID)
        fork = sm.call("session::fork", {"session_id": ODD_ID, "entry_id": leaf, "title": "fork"})["session_id"]
    # A real server (Starlette's TestClient decodes a path twice: %2541 would reach the app as "A").
    with session_manager.open(dst, read_only=True) as sm, running(sm) as base, httpx.Client(base_url=base) as c:
        links = re.findall(r'<a href="(/sessions/[^"]*)">odd</a>', c.get("/").text)
        assert links == ["/sessions/s%2Fx%3Fy%23z%20%26w%2541"]
        page = c.get(links[0])
        assert page.status_code == 200 and "<h1>odd</h1>" in page.text and "hello" in page.text
        api = c.get("/api" + links[0])
        assert api.status_code == 200 and api.json()["meta"] == sm.call("session::get", {"session_id": ODD_ID})["meta"]
        back = re.findall(r'forked from <a href="([^"]*)">', c.get(f"/sessions/{fork}").text)
        assert [unquote(x) for x in back] == [f"/sessions/{ODD_ID}"]
        assert c.get("/api/sessions/s%2Fx").status_code == 404  # a prefix of it is not it


def test_attachments_are_shown_served_and_inlined_in_the_export(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: an attachment-backed image not shown, a file not downloadable (or served as a page
    of the viewer's origin: an HTML attachment rendered would run its script), its name unescaped, or
    the export depending on the server for either."""
    import base64
    import re

    from session_manager._cli.data import main
    from tests.unit.viewer_support import PNG

    page_html = b"<script>window.__pwned = 1</script>"
    name = 'notes "<b>".html'
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        sid = sm.call("session::create", {"title": "files"})["session_id"]
        image = sm.call("session::put-attachment", {"session_id": sid, "name": "chart.png", "mime": "image/png",
                                                    "data": PNG})["attachment"]
        file = sm.call("session::put-attachment", {"session_id": sid, "name": name, "mime": "text/html",
                                                   "data": base64.b64encode(page_html).decode()})
        sm.call("session::append", {"session_id": sid, "message": assistant(
            text("a chart and a file"), {"type": "image", "mime": "image/png", "data": "",
                                         "attachment_id": image["attachment_id"]}, file["block"])})
    with session_manager.open(d, read_only=True) as sm:
        c = TestClient(create_app(sm), base_url=BASE)
        html = c.get(f"/sessions/{sid}").text
        image_url = f"/sessions/{sid}/attachments/{image['attachment_id']}"
        file_url = f"/sessions/{sid}/attachments/{file['attachment']['attachment_id']}"
        assert f'<img src="{image_url}"' in html
        assert f'<a href="{file_url}" download="notes &quot;&lt;b&gt;&quot;.html">' in html
        assert '"<b>"' not in html
        shown = c.get(image_url)
        assert shown.headers["content-type"] == "image/png" and shown.content == base64.b64decode(PNG)
        download = c.get(file_url)
        assert download.content == page_html
        assert download.headers["content-type"] == "application/octet-stream"  # never text/html here
        assert download.headers["content-disposition"].startswith("attachment;")
        assert download.headers["x-content-type-options"] == "nosniff"
    assert main(["export", str(d), sid, "--html"]) == 0
    exported = capsys.readouterr().out
    assert re.findall(r'<img src="data:image/png;base64,([^"]+)"', exported) == [PNG]
    assert f'data:text/html;base64,{base64.b64encode(page_html).decode()}' in exported  # inline, a download
    assert "/attachments/" not in exported


def test_the_viewer_writes_nothing_in_an_fs_data_dir(data: Any) -> None:
    """Regression: the viewer (its pages, API, search box, attachment route, event stream and the
    follower behind it) creating, changing or removing any file of the data_dir it follows beside a
    live owner: it must open it read-only and leave it as it found it."""
    d, ids = data

    def files() -> dict[str, tuple[int, int]]:
        return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in d.rglob("*")}

    with session_manager.open(d):  # the owner, live (its lock held) and idle meanwhile
        before = files()
        with session_manager.open(d, read_only=True) as sm, running(sm) as base, \
                httpx.Client(base_url=base) as c:
            got, stop = _listen(base, "/api/events")
            for path in ("/", "/?q=paris", "/?status=working", f"/sessions/{ids['sid']}",
                         f"/sessions/{ids['fork']}", "/api/sessions", f"/api/sessions/{ids['sid']}",
                         "/sessions/s_nope", "/static/viewer.css"):
                assert c.get(path).status_code in (200, 404), path
            time.sleep(0.5)  # (the follower polls the logs meanwhile)
            assert got.empty()
            stop.set()
        assert files() == before


def test_list_rows_show_title_status_count_updated_metadata_and_fork(client: Any, data: Any) -> None:
    """Regression: a list row missing one of the issue's columns or showing another session's."""
    import re

    from session_manager._browse.render import when

    c, sm = client
    ids = data[1]
    html = c.get("/").text
    for sid in (ids["sid"], ids["fork"]):
        meta = sm.call("session::get", {"session_id": sid})["meta"]
        row = re.search(rf'<tr data-session-id="{sid}">(.*?)</tr>', html)
        assert row is not None
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
        assert len(cells) == 6
        assert f">{meta['title']}</a>" in cells[0]
        assert f">{meta['status']}</span>" in cells[1]
        assert cells[2] == str(meta["message_count"])
        assert cells[3] == when(meta["updated_at"])
        if sid == ids["sid"]:
            assert cells[4] == '<code>{&quot;user&quot;: &quot;u_1&quot;}</code>' and cells[5] == ""
        else:
            assert cells[5] == f'<a href="/sessions/{ids["sid"]}">{ids["sid"]}</a>'
    assert ">working</span>" in html and ">5</td>" in html


def test_ci_makes_the_browser_tests_run_never_skip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Regression: CI passing with the browser tests skipped (no Chromium, no Playwright): .ci/run
    requires them before any pytest run, and under that requirement a missing browser fails them."""
    from tests.unit import viewer_support

    ci = (Path(__file__).parents[2] / ".ci" / "run").read_text(encoding="utf-8")
    required = ci.index("export SESSION_MANAGER_REQUIRE_BROWSER=1")
    import re

    first_run = re.search(r"^pytest |^\S.*\bpytest -m ", ci, re.MULTILINE)
    assert first_run is not None and required < first_run.start()
    assert "apt-get install -y -q chromium" in ci[:required]
    monkeypatch.setattr(viewer_support, "CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.setattr(viewer_support, "REQUIRED", True)
    with pytest.raises(pytest.fail.Exception, match="SESSION_MANAGER_REQUIRE_BROWSER=1 but no Chromium"):
        viewer_support.need_browser()
    monkeypatch.setattr(viewer_support, "REQUIRED", False)
    with pytest.raises(pytest.skip.Exception, match="no Chromium"):  # elsewhere: a skip saying why
        viewer_support.need_browser()


def test_a_stored_role_or_block_type_outside_the_schema_is_escaped_too() -> None:
    """Regression: an entry's role put into a class attribute unescaped. The stores hand back what a
    log or a database holds (a hand-edited or foreign-written data_dir included), so nothing read is
    trusted to be one of the schema's words."""
    from session_manager._browse.reading import Tree
    from session_manager.viewer.render import SessionView, session_body

    evil = '"><img src=x onerror=alert(1)>'
    entry = {"id": "e_1", "parent_id": None, "timestamp": 0, "kind": "message",
             "message": {"role": evil, "content": [{"type": evil}, {"type": "text", "text": evil}]}}
    tree = Tree({"e_1": entry}, {None: ["e_1"]}, "e_1", frozenset({"e_1"}))
    html = session_body(SessionView({"session_id": evil, "title": evil, "status": evil}, tree))
    assert "<img" not in html  # nothing breaks out of an attribute or into markup
    assert html.count("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;") >= 4  # role, label, block type, text


def test_an_fs_burst_from_another_process_reaches_the_stream_once_and_in_order(tmp_path: Path) -> None:
    """Regression: the fs follower doubling, dropping or reordering a session's entries when another
    process writes faster than it polls. (It sees states: a session made and changed between two polls
    is one on-created of its latest state; docs/viewer.md.)"""
    from tests.unit.test_viewer_sqlite import _write

    d = tmp_path / "d"
    with session_manager.open(d):
        pass
    with session_manager.open(d, read_only=True) as sm, running(sm) as base:
        got, stop = _listen(base, "/api/events")
        expected = _write(str(d), "burst")
        created = [ev for f, ev in expected if f == "session::on-created"]
        added = [ev for f, ev in expected if f == "session::on-message-added"]
        arrived = [got.get(timeout=30) for _ in range(len(created) + len(added))]
        deadline = time.monotonic() + 2.0  # the status and meta changes, unless folded into on-created
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                arrived.append(got.get(timeout=0.1))
        for sid in {ev["session_id"] for ev in created}:
            mine = [(f, ev) for f, ev in arrived if ev["session_id"] == sid]
            assert mine[0][0] == "session::on-created"
            assert [ev["entry_id"] for f, ev in mine if f == "session::on-message-added"] == \
                [ev["entry_id"] for ev in added if ev["session_id"] == sid]  # each once, in order
            assert [ev["message"] for f, ev in mine if f == "session::on-message-added"] == \
                [ev["message"] for ev in added if ev["session_id"] == sid]
            assert len(mine) == len({(f, ev.get("entry_id")) for f, ev in mine})  # nothing twice
        final = {m["session_id"]: m for m in sm.call("session::list", {})["sessions"]}
        a, b = created[0]["session_id"], created[1]["session_id"]
        assert final[a]["status"] == "working" and final[b]["title"] == "b2"  # the latest state
        stop.set()


def test_entries_of_one_millisecond_keep_their_append_order(tmp_path: Path) -> None:
    # Prevents: entries written within one millisecond listed by their ids' order instead of the
    # order they were appended (the API and the tree sorted ties by id: a flaky engine-view test
    # and a reply shown before its question on a fast writer).
    from session_manager._browse import reading
    from session_manager.clock import ManualClock
    from session_manager.viewer import reads

    with session_manager.open(tmp_path / "data", clock=ManualClock()) as sm:
        sid = sm.call("session::create", {"title": "tie"})["session_id"]
        first = sm.call("session::append", {"session_id": sid, "entry_id": "e_zz", "message": user("q")})
        second = sm.call("session::append", {"session_id": sid, "entry_id": "e_aa", "parent_id": first["entry_id"],
                                             "message": assistant()})
        sibling = sm.call("session::append", {"session_id": sid, "entry_id": "e_00", "parent_id": first["entry_id"],
                                              "message": user("again")})
        body = reads.api_session(sm, sid)
        assert [e["id"] for e in body["entries"]] == ["e_zz", "e_aa", "e_00"]
        assert body["active_leaf"] == sibling["entry_id"]
        tree = reading.branch_tree(sm, sid)
        assert tree.children[None] == ["e_zz"] and tree.children["e_zz"] == [second["entry_id"], "e_00"]
