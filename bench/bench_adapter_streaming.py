"""A reply streamed through the framework adapters, as their protocols allow
(figures, not a test): what is left on disk beside the final message.

Run: ``python bench/bench_adapter_streaming.py [--chunks N]``.

Neither protocol can update a message in place, so a stream replaces its
partial reply on every chunk: OpenAI Agents by ``pop_item`` + ``add_items``
(the popped item stays on its branch: the tree is the product), or by
``clear_session`` + ``add_items``; LangChain by ``clear`` + ``add_messages``.
Since issue 25 #9 a clear deletes for real, so the clear modes leave about
the final conversation; pop keeps every partial reply. Issue 25 measured
727x and 1,007x before (clear kept everything on dead branches).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import session_manager

CHUNK = "word "
MODES = ("agents pop+add", "agents clear+add", "langchain clear+add")


def _disk(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.rglob("*") if p.is_file())


def _agents(sm: session_manager.SessionManager, chunks: int, by_clear: bool) -> None:
    from session_manager.adapters.openai_agents import AgentsSession

    session = AgentsSession("c", sm)
    question: list[Any] = [{"role": "user", "content": "q"}]  # the SDK's TypedDict items, as JSON
    asyncio.run(session.add_items(question))
    for i in range(chunks):
        if i and by_clear:
            asyncio.run(session.clear_session())
            asyncio.run(session.add_items(question))
        elif i:
            asyncio.run(session.pop_item())
        reply: list[Any] = [{"role": "assistant", "content": CHUNK * (i + 1)}]
        asyncio.run(session.add_items(reply))


def _langchain(sm: session_manager.SessionManager, chunks: int) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from session_manager.adapters.langchain import SessionChatMessageHistory

    history = SessionChatMessageHistory("c", sm)
    history.add_messages([HumanMessage("q")])
    for i in range(chunks):
        if i:
            history.clear()
            history.add_messages([HumanMessage("q")])
        history.add_messages([AIMessage(CHUNK * (i + 1))])


def measure(mode: str, chunks: int) -> int:
    """Bytes on disk after streaming ``chunks`` chunks in ``mode``."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "d"
        with session_manager.open(data_dir) as sm:
            if mode == "langchain clear+add":
                _langchain(sm, chunks)
            else:
                _agents(sm, chunks, by_clear=mode == "agents clear+add")
        return _disk(data_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=1000, help="chunks of 5 characters (default 1000)")
    args = parser.parse_args()
    final = len(CHUNK) * args.chunks
    print(f"streaming a {final:,d}-byte reply in {args.chunks:,d} chunks through the adapters")
    for mode in MODES:
        disk = measure(mode, args.chunks)
        print(f"  {mode:20s} {disk:>12,d} bytes on disk  = {disk / final:8.1f}x the final message")


if __name__ == "__main__":
    main()
