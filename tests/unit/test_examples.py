"""Every script in examples/ runs as a user runs it: its own interpreter, from another working directory.

Each test names the regression it prevents: an example that no longer runs, or that runs but no longer
shows what its docstring promises (read back from the store, not only from what it prints).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import session_manager

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 60  # each example promises to finish within a minute


def run_example(name: str, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Runs ``examples/<name>`` from ``cwd`` (not the repository), returns its stdout."""
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_every_example_has_a_test() -> None:
    # Prevents: an example added to examples/ that CI never runs.
    tested = {"quickstart.py", "streaming_abort.py", "fork_edit_regenerate.py", "openai_agents_chat.py",
              "langgraph_history.py", "sse_chat.py", "iii_client.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def normalized_tree(text: str) -> list[str]:
    """``data show --tree`` output without what differs per run (ids, times)."""
    text = re.sub(r"\b[se]_[0-9a-f]{32}\b", "ID", text)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "TIME", text)
    return [line.rstrip() for line in text.strip().splitlines()]


def test_quickstart_writes_the_conversation_the_readme_pictures(tmp_path: Path) -> None:
    # Prevents: the quickstart breaking, or the README's picture no longer being what it produces.
    data = tmp_path / "data"
    out = run_example("quickstart.py", str(data), cwd=tmp_path)
    sid = re.search(r"^session (s_[0-9a-f]+) in", out, re.M)
    assert sid is not None, out
    shown = subprocess.run([Path(sys.executable).parent / "session-manager", "data", "show", str(data),
                            sid.group(1), "--tree"], capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    picture = readme[readme.index("```text\n", readme.index("## What it does")) + 8:]
    picture = picture[:picture.index("```")]
    assert normalized_tree(shown.stdout) == normalized_tree(picture)
    with session_manager.open(data, read_only=True) as sm:
        listed = sm.list().sessions
        assert sorted(s.title for s in listed) == ["Try again", "Weather"]


def test_streaming_abort_keeps_the_text_so_far_and_closes_the_open_call(tmp_path: Path) -> None:
    # Prevents: an abort that loses the streamed text, keeps streaming, or leaves a function call without
    # a result (a transcript most model APIs refuse), or no trace of why the reply stopped.
    data = tmp_path / "data"
    out = run_example("streaming_abort.py", str(data), cwd=tmp_path)
    assert out.splitlines()[1:] == ["user: Weather in Paris this week?", "assistant: Let me check the ",
                                    "function_result: stopped by the user"], out
    with session_manager.open(data, read_only=True) as sm:
        (meta,) = sm.list().sessions
        assert (meta.status, meta.status_reason) == ("done", "aborted by the user")
        reply, result = list(sm.transcript(meta.session_id))[1:]
        stored = sm.get_message(meta.session_id, entry_id=reply.entry_id)
        assert stored is not None and stored.entry.revision == 4
        call = reply.message.content[1]
        assert result.message.function_call_id == call.id and result.message.is_error  # type: ignore[union-attr]


def test_fork_edit_regenerate_keeps_every_branch(tmp_path: Path) -> None:
    # Prevents: a regenerate or an edit that overwrites instead of branching, or a fork that copies too much.
    out = run_example("fork_edit_regenerate.py", str(tmp_path / "data"), cwd=tmp_path)
    lines = dict(line.split(": ", 1) for line in out.strip().splitlines())
    assert lines["regenerated"].endswith("user: A city for a weekend? | assistant: Lisbon.")
    assert lines["edited"].endswith("user: A city by the sea for a weekend? | assistant: Porto.")
    assert lines["original"].endswith("user: A city for a weekend? | assistant: Rome.")
    assert lines["forked"].endswith("assistant: Hello! Where to? | user: A city for a weekend?")
    assert lines["versions"] == "[('Rome.', False), ('Lisbon.', True)]"


def test_openai_agents_example_runs_two_turns_with_memory(tmp_path: Path) -> None:
    # Prevents: the Agents example (scripted model, AgentsSession) no longer running or not remembering.
    pytest.importorskip("agents", reason="the openai-agents extra is not installed")
    out = run_example("openai_agents_chat.py", str(tmp_path / "data"), cwd=tmp_path)
    assert "['It is sunny in Paris.', 'You asked about Paris.']" in out
    assert "stored roles: ['user', 'assistant', 'function_result', 'assistant', 'user', 'assistant']" in out


def test_langgraph_example_keeps_the_thread(tmp_path: Path) -> None:
    # Prevents: the LangGraph/LangChain example no longer running, or the second turn not seeing the first.
    pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
    out = run_example("langgraph_history.py", str(tmp_path / "data"), cwd=tmp_path)
    assert "graph: ['hi', 'message #2', 'again', 'message #4']" in out
    assert "history: ['Weather in Paris?', 'Sunny.']" in out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SseReader:
    """Reads one Server-Sent Events stream on a thread: (event name, data) pairs."""

    def __init__(self, url: str) -> None:
        import httpx

        self.events: list[tuple[str, Any]] = []
        self._client = httpx.Client(timeout=httpx.Timeout(5.0, read=None))
        self._stream = self._client.stream("GET", url)
        self._response = self._stream.__enter__()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        name = ""
        try:
            for line in self._response.iter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    self.events.append((name, json.loads(line[6:])))
        except Exception:  # closed by close(): the stream ends
            return

    def wait(self, what: str, predicate: Any, timeout: float = 20.0) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for event in list(self.events):
                if predicate(event):
                    return event
            time.sleep(0.05)
        raise AssertionError(f"no {what} within {timeout} s; got {self.events}")

    def close(self) -> None:
        self._client.close()


def test_sse_chat_delivers_another_processs_messages_live(tmp_path: Path) -> None:
    # Prevents: the SSE chat example breaking, or a browser served by one worker process missing a
    # message another process stored (the sqlite adapter's cross-process events).
    pytest.importorskip("starlette", reason="the viewer extra (Starlette, uvicorn) is not installed")
    pytest.importorskip("httpx", reason="httpx (test extra) is not installed")
    import httpx

    port = free_port()
    server = subprocess.Popen([sys.executable, str(EXAMPLES / "sse_chat.py"), "--port", str(port),
                               "--workers", "2", "--db", str(tmp_path / "chat.db")], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    reader = None
    try:
        end = time.monotonic() + 30
        while True:
            try:
                assert httpx.get(base + "/", timeout=2).status_code == 200
                break
            except (httpx.HTTPError, AssertionError):
                if time.monotonic() > end or server.poll() is not None:
                    raise AssertionError("the app did not start") from None
                time.sleep(0.2)
        reader = SseReader(base + "/events")
        streaming_pid = reader.wait("hello", lambda e: e[0] == "hello")[1]["pid"]
        assert httpx.post(base + "/messages", json={"text": ""}).status_code == 400
        served_by: set[int] = set()
        for i in range(40):  # new connections until one lands on the other process
            answer = httpx.post(base + "/messages", json={"text": f"hi {i}"}, timeout=10).json()
            served_by.add(answer["served_by"])
            if answer["served_by"] != streaming_pid:
                break
        else:
            pytest.fail(f"40 posts all served by the streaming process {streaming_pid}: one worker process?")
        assert len(served_by) >= 1 and answer["served_by"] != streaming_pid
        final = f"You said: hi {i}"
        reader.wait("the other process's user message",
                    lambda e: e[0] == "message-added" and e[1]["message"]["content"] == [
                        {"type": "text", "text": f"hi {i}"}])
        reader.wait("its streamed reply, final revision",
                    lambda e: e[0] == "message-updated" and e[1]["entry_id"] == answer["entry_id"]
                    and e[1]["message"]["content"][0]["text"] == final)
        with session_manager.open(f"sqlite:///{tmp_path / 'chat.db'}") as sm:
            stored = sm.get_message("chat-1", entry_id=answer["entry_id"])
            assert stored is not None and stored.entry.message.content[0].text == final  # type: ignore[union-attr]
    finally:
        if reader is not None:
            reader.close()
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_iii_client_without_an_engine_says_so(tmp_path: Path) -> None:
    # Prevents: the iii client example failing with a traceback where no engine is configured.
    env = {k: v for k, v in os.environ.items() if k != "III_ENGINE_WS_URL"}
    done = subprocess.run([sys.executable, str(EXAMPLES / "iii_client.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0 and "III_ENGINE_WS_URL is not set" in done.stdout, done.stdout + done.stderr


@pytest.mark.engine
def test_iii_client_calls_and_observes_over_the_engine(tmp_path: Path) -> None:
    # Prevents: the iii client example going stale, and the documented difference between what a
    # remote observer receives (the envelope, the event under input/output) and a bare delivery.
    from tests.steps.engine_steps import Bus, engine_url

    bus = Bus(engine_url(), tmp_path)
    try:
        bus.connect()  # skips, saying why, without an engine or beside another session-manager
        bus.register_surface()
        out = run_example("iii_client.py", cwd=tmp_path, env={"III_ENGINE_WS_URL": engine_url()})
        assert "messages: ['hello over the engine']" in out
        envelope_keys = re.search(r"^envelope keys: (.*)$", out, re.M)
        assert envelope_keys is not None and "'input'" in envelope_keys.group(1)
        assert "'output'" in envelope_keys.group(1) and "'observer_id'" in envelope_keys.group(1)
        assert "'session_id'" in out.split("bare event keys:")[1]
    finally:
        bus.close()


@pytest.mark.engine
def test_iii_client_on_a_bare_engine_says_so_or_starts_its_own_worker_and_stops_it(tmp_path: Path) -> None:
    # Prevents: the example failing on an engine with no session-manager attached (an observer
    # "still pending after 10s" for a user who started only the stand-in, as the README says), a
    # worker started (and writing sessions) without being asked, and the worker it starts outliving
    # it (its functions left registered on the engine).
    from tests.steps.engine_steps import Bus, engine_url, session_functions, wait_for

    bus = Bus(engine_url(), tmp_path)
    try:
        bus.connect()  # skips, saying why, without an engine or beside another session-manager
        # Without --start-worker it says what is missing (exit 1, one line), and starts nothing.
        done = subprocess.run([sys.executable, str(EXAMPLES / "iii_client.py")], cwd=tmp_path, capture_output=True,
                              text=True, timeout=TIMEOUT_S, env={**os.environ, "III_ENGINE_WS_URL": engine_url()})
        assert done.returncode == 1 and done.stderr.strip().startswith("no session-manager worker is attached"), done
        assert not session_functions(bus.caller)
        out = run_example("iii_client.py", "--start-worker", cwd=tmp_path, env={"III_ENGINE_WS_URL": engine_url()})
        assert out.splitlines()[0] == "started a session-manager worker on the engine", out
        assert "messages: ['hello over the engine']" in out
        wait_for(lambda: not session_functions(bus.caller), what="the example's worker withdrawn")
    finally:
        bus.close()
