"""OpenAI Agents SDK: a two-turn run whose memory is a session-manager session.

    python examples/openai_agents_chat.py [DATA_DIR]      # needs the openai-agents extra

The model is scripted (no network, no API key): it first calls a tool, then
answers. ``AgentsSession`` stores every item as an ordinary message, so the
same conversation is visible to ``session::messages``, role filters, events
and ``session-manager data show``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

import session_manager
from session_manager.adapters.openai_agents import AgentsSession

set_tracing_disabled(True)  # nothing leaves the machine


class ScriptedModel(Model):
    """A Model answering from a script (a real one: ``Agent(model="gpt-5")``)."""

    def __init__(self, outputs: list[list[Any]]) -> None:
        self.outputs = list(outputs)

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, *, previous_response_id: Any = None,
                           conversation_id: Any = None, prompt: Any = None) -> ModelResponse:
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this example runs non-streamed")


def say(text: str, id: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(id=id, type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def chat(sm: session_manager.SessionManager) -> list[str]:
    model = ScriptedModel([
        [ResponseFunctionToolCall(type="function_call", id="fc_1", call_id="call_1", name="get_weather",
                                  arguments='{"city":"Paris"}', status="completed")],
        [say("It is sunny in Paris.", "msg_1")],
        [say("You asked about Paris.", "msg_2")],
    ])
    agent = Agent(name="weather", model=model, tools=[get_weather])
    session = AgentsSession("chat-42", sm, model="scripted", provider="example")
    first = await Runner.run(agent, "Weather in Paris?", session=session)
    second = await Runner.run(agent, "Which city did I ask about?", session=session)  # memory via the session
    return [str(first.final_output), str(second.final_output)]


def main(data_dir: str) -> list[str]:
    with session_manager.open(data_dir) as sm:
        answers = asyncio.run(chat(sm))
        roles = [m.message.role for m in sm.messages("chat-42").messages]
    print(answers)
    print("stored roles:", roles)
    return roles


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="sm-agents-"))
