"""The viewer and the HTML export in a real browser: Debian's headless Chromium driven by Playwright.

Skips (saying why) without Chromium or Playwright; .ci/run installs Chromium and sets
SESSION_MANAGER_REQUIRE_BROWSER=1, so there these run and never skip. The viewer follows a data_dir
read-only while other processes write it, as beside a live agent."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import session_manager
from tests.unit.viewer_support import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    artifacts_dir,
    assistant,
    branched_session,
    need_browser,
    running,
    text,
    user,
)

pytestmark = pytest.mark.browser
TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    p = context.new_page()
    p.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    yield p
    context.close()
    assert errors == []  # the page's script never failed


def _writer(data_dir: Path | str, body: str) -> subprocess.Popen[str]:
    """Another process writing the data_dir or database (an fs data_dir: it owns it; the viewer reads
    beside it)."""
    script = "import sys, session_manager\n" + f"with session_manager.open({str(data_dir)!r}) as sm:\n" + \
        textwrap.indent(textwrap.dedent(body), "    ")
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


# The adapters a second process writes while the viewer follows: an fs data_dir (the viewer's
# read-only open and its follower) and a sqlite database (its outbox). Postgres (LISTEN) and an engine
# are followed in test_viewer_postgres.py and test_viewer_engine.py.
LOCAL_ADAPTERS = ["fs", "sqlite"]


def _target(tmp_path: Path, adapter: str) -> str:
    return str(tmp_path / "d") if adapter == "fs" else f"sqlite:///{tmp_path / 'sessions.db'}"


def _viewer_open(target: str) -> session_manager.SessionManager:
    """The store as `data serve` opens it (an fs data_dir read-only; sqlite as it is)."""
    from session_manager._cli.data.opening import open_for

    return open_for(target, writable=False)


def test_list_then_a_branched_session_active_path_and_alternative(page: Any, tmp_path: Path,
                                                                  record_property: Any) -> None:
    """Regression: the alternative branch unreachable, or shown as if it were the active path."""
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        ids = branched_session(sm)
    with session_manager.open(d, read_only=True) as sm, running(sm) as base:
        page.goto(base + "/")
        row = page.locator(f'tr[data-session-id="{ids["sid"]}"]')
        assert row.locator("td.title a").inner_text() == "Weather in Paris"
        row.locator("td.title a").click()
        page.wait_for_url(f"**/sessions/{ids['sid']}")
        active = page.locator("#conversation > article.msg.active")
        assert active.evaluate_all("els => els.map(e => e.dataset.entryId)") == [
            ids["question"], ids["main"], ids["result"], ids["final"]]
        assert "Take an umbrella." in page.locator("article.msg.leaf").inner_text()
        alternative = page.locator(f"#alt-{ids['alternative']}")
        assert not page.get_by_text("Probably not; the first answer.", exact=True).is_visible()
        alternative.locator("summary").click()
        shown = alternative.locator(f"#e-{ids['alternative']}")
        assert shown.is_visible() and "Probably not; the first answer." in shown.inner_text()
        assert "active" not in (shown.get_attribute("class") or "").split()
        page.locator("details.thinking summary").click()
        shot = artifacts_dir(tmp_path) / "viewer-session.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the session page: {shot}")
        record_property("screenshot", str(shot))  # (in the JUnit report too)


@pytest.mark.parametrize("adapter", LOCAL_ADAPTERS)
def test_a_reply_streamed_by_another_process_grows_on_screen_without_reload(page: Any, tmp_path: Path,
                                                                            adapter: str) -> None:
    """Regression: a page that shows a streamed reply only after a reload (over sqlite: a viewer
    that never followed the outbox). The writer makes each of its 20 updates when told to, and the
    page must show that very text before the next one."""
    d = _target(tmp_path, adapter)
    with session_manager.open(d) as sm:
        sid = sm.call("session::create", {"title": "streaming"})["session_id"]
        sm.call("session::append", {"session_id": sid, "message": user("Tell me a story")})
        rid = sm.call("session::append", {"session_id": sid, "message": assistant()})["entry_id"]
    words = [f"w{i}" for i in range(1, 21)]
    with _viewer_open(d) as sm, running(sm) as base:
        page.goto(f"{base}/sessions/{sid}")
        page.wait_for_selector("#live.on")
        page.evaluate("window.__same_document = true")
        writer = _writer(d, f"""
            text = ""
            for word in {words!r}:
                sys.stdin.readline()
                text = (text + " " + word).strip()
                sm.call("session::update-message", {{"session_id": {sid!r}, "entry_id": {rid!r},
                        "content": [{{"type": "text", "text": text}}]}})
                print("ok", flush=True)
        """)
        assert writer.stdin is not None and writer.stdout is not None
        try:
            for i in range(1, 21):
                writer.stdin.write("go\n")
                writer.stdin.flush()
                assert writer.stdout.readline() == "ok\n"
                expected = " ".join(words[:i])
                page.wait_for_function(
                    "([id, t]) => { const el = document.querySelector('#e-' + id + ' .text');"
                    " return el !== null && el.textContent === t; }", arg=[rid, expected])
        finally:
            writer.stdin.close()
            assert writer.wait(timeout=60) == 0
        assert page.evaluate("window.__same_document") is True  # no reload happened
        assert page.locator(f"#e-{rid} .text").inner_text() == " ".join(words)


@pytest.mark.parametrize("adapter", LOCAL_ADAPTERS)
def test_sessions_made_and_deleted_elsewhere_come_and_go_in_the_list(page: Any, tmp_path: Path,
                                                                     adapter: str) -> None:
    """Regression: a list that misses a new session or keeps showing a deleted one until reloaded."""
    d = _target(tmp_path, adapter)
    with session_manager.open(d) as sm:
        keep = sm.call("session::create", {"title": "stays"})["session_id"]
        doomed = sm.call("session::create", {"title": "doomed"})["session_id"]
    with _viewer_open(d) as sm, running(sm) as base:
        page.goto(base + "/")
        page.wait_for_selector("#live.on")
        page.evaluate("window.__same_document = true")
        assert page.locator(f'tr[data-session-id="{doomed}"]').count() == 1
        writer = _writer(d, f"""
            sm.call("session::delete", {{"session_id": {doomed!r}}})
            print(sm.call("session::create", {{"title": "newcomer"}})["session_id"], flush=True)
        """)
        assert writer.stdout is not None
        new = writer.stdout.readline().strip()
        assert writer.wait(timeout=60) == 0
        page.wait_for_selector(f'tr[data-session-id="{doomed}"]', state="detached")
        page.wait_for_selector(f'tr[data-session-id="{new}"]')
        assert page.locator(f'tr[data-session-id="{new}"] td.title a').inner_text() == "newcomer"
        assert page.locator(f'tr[data-session-id="{keep}"]').count() == 1
        assert page.evaluate("window.__same_document") is True


EVIL = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'


def test_a_script_message_renders_as_text_and_runs_nothing(page: Any, tmp_path: Path) -> None:
    """Regression: stored text executed in the viewer (on load, and when swapped in live)."""
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        sid = sm.call("session::create", {"title": EVIL})["session_id"]
        sm.call("session::append", {"session_id": sid, "message": user(EVIL)})
    with session_manager.open(d, read_only=True) as sm, running(sm) as base:
        page.goto(base + "/")
        assert page.locator(f'tr[data-session-id="{sid}"] td.title a').inner_text() == EVIL
        page.goto(f"{base}/sessions/{sid}")
        page.wait_for_selector("#live.on")
        assert page.locator("article.role-user .text").inner_text() == EVIL
        writer = _writer(d, f"""
            sm.call("session::append", {{"session_id": {sid!r}, "message": {assistant(text(EVIL))!r}}})
        """)
        assert writer.wait(timeout=60) == 0
        page.wait_for_selector("article.role-assistant")  # swapped in live
        assert page.locator("article.role-assistant .text").inner_text() == EVIL
        page.wait_for_timeout(300)  # (an onerror would have fired by now)
        assert page.evaluate("window.__pwned") is None


def test_the_html_export_opened_from_disk_shows_every_branch_and_fetches_nothing(
        page: Any, tmp_path: Path) -> None:
    """Regression: an export that needs the network (an external URL) or loses a branch."""
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        ids = branched_session(sm)
    out = tmp_path / "chat.html"
    done = subprocess.run([sys.executable, "-m", "session_manager", "data", "export", str(d), ids["sid"], "--html",
                           "-o", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    html = out.read_text(encoding="utf-8")
    outside_data = re.sub(r'"data:[^"]*"', '""', html)  # (base64 may hold any "//")
    assert re.findall(r"(?:https?|wss?|ftp):|//", outside_data) == []  # no external URL of any kind
    assert re.findall(r'(?:src|href)="(?!data:|#)[^"]*"', html) == []  # every src/href inline or in-page
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(out.as_uri())
    assert {u.split(":", 1)[0] for u in requests} <= {"file", "data"}
    for key in ("question", "main", "result", "final"):
        assert page.locator(f"#e-{ids[key]}").is_visible()
    page.locator(f"#alt-{ids['alternative']} summary").click()
    assert "Probably not; the first answer." in page.locator(f"#e-{ids['alternative']}").inner_text()
    assert page.locator("figure.image img").evaluate("img => img.naturalWidth") > 0


def test_the_pages_read_without_javascript(browser: Any, tmp_path: Path) -> None:
    """Regression: a page whose titles and texts appear only once a script ran (the issue: rendered on
    the server, read without JavaScript; the script only adds live updates)."""
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        ids = branched_session(sm)
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        with session_manager.open(d, read_only=True) as sm, running(sm) as base:
            page.goto(base + "/")
            assert page.locator(f'tr[data-session-id="{ids["sid"]}"] td.title a').inner_text() == "Weather in Paris"
            page.locator(f'tr[data-session-id="{ids["fork"]}"] td.title a').click()
            page.wait_for_url(f"**/sessions/{ids['fork']}")
            page.locator(f'a[href="/sessions/{ids["sid"]}"]').click()  # forked from: the link back
            page.wait_for_url(f"**/sessions/{ids['sid']}")
            assert page.locator("#live").inner_text() == "offline"  # no script ran
            assert "Take an umbrella." in page.locator("article.msg.leaf").inner_text()
            alternative = page.locator(f"#alt-{ids['alternative']}")
            alternative.locator("summary").click()  # <details>: no script needed
            assert "Probably not; the first answer." in alternative.locator(f"#e-{ids['alternative']}").inner_text()
    finally:
        context.close()


def test_a_token_visit_sets_the_cookie_that_carries_links_and_the_live_stream(page: Any, tmp_path: Path) -> None:
    """Regression: behind a token, the first `?token=` page working but its links, its fragment
    fetches or its EventSource (which cannot send an Authorization header) answered 401."""
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        sid = sm.call("session::create", {"title": "behind a token"})["session_id"]
    with session_manager.open(d, read_only=True) as sm, running(sm, token="s3cret-t0ken") as base:
        assert page.goto(base + "/").status == 401
        assert page.goto(base + "/?token=s3cret-t0ken").status == 200
        page.locator(f'tr[data-session-id="{sid}"] td.title a').click()  # no token in this URL
        page.wait_for_url(f"**/sessions/{sid}")
        page.wait_for_selector("#live.on")  # the event stream opened with the cookie
        writer = _writer(d, f"""
            sm.call("session::append", {{"session_id": {sid!r}, "message": {user("arrived live")!r}}})
        """)
        assert writer.wait(timeout=60) == 0
        page.wait_for_selector("article.role-user")  # the fragment fetch carried the cookie too
        assert page.locator("article.role-user .text").inner_text() == "arrived live"


def test_a_fork_made_and_deleted_elsewhere_comes_and_goes_on_its_parents_page(page: Any, tmp_path: Path) -> None:
    """Regression: forks linked both ways only after a reload: the parent's page, following its own
    session's events only, never heard of a fork made (or deleted) by another process."""
    d = tmp_path / "d"
    with session_manager.open(d) as sm:
        sid = sm.call("session::create", {"title": "parent"})["session_id"]
        first = sm.call("session::append", {"session_id": sid, "message": user("fork me")})["entry_id"]
    with session_manager.open(d, read_only=True) as sm, running(sm) as base:
        page.goto(f"{base}/sessions/{sid}")
        page.wait_for_selector("#live.on")
        page.evaluate("window.__same_document = true")
        assert page.locator("div.fork").count() == 0
        writer = _writer(d, f"""
            fork = sm.call("session::fork", {{"session_id": {sid!r}, "entry_id": {first!r}}})["session_id"]
            print(fork, flush=True)
            sys.stdin.readline()
            sm.call("session::delete", {{"session_id": fork}})
        """)
        assert writer.stdin is not None and writer.stdout is not None
        fork = writer.stdout.readline().strip()
        link = page.locator(f'div.fork a[href="/sessions/{fork}"]')
        link.wait_for()
        assert page.locator("div.fork").inner_text() == f"forks: {fork}"
        writer.stdin.write("go\n")
        writer.stdin.close()
        assert writer.wait(timeout=60) == 0
        link.wait_for(state="detached")
        assert page.locator("h1").inner_text() == "parent"  # still the parent's page, not "deleted"
        assert page.evaluate("window.__same_document") is True
