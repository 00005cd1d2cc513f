"""The OpenAI Agents SDK pieces the adapter's tests drive the real ``Runner`` with.

Imported inside the tests that run the SDK, never at a test module's top: importing ``agents``
(and ``openai`` under it) costs seconds, and every xdist worker imports every test module at
collection."""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.memory import Session
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

__all__ = ["Agent", "ResponseFunctionToolCall", "Runner", "ScriptedModel", "Session", "get_weather", "say"]

set_tracing_disabled(True)  # no exporter: the tests never leave the machine


class ScriptedModel(Model):
    """A Model that answers from a script and records the input of every turn."""

    def __init__(self, outputs: list[list[Any]]) -> None:
        self.outputs = list(outputs)
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, *, previous_response_id: Any = None,
                           conversation_id: Any = None, prompt: Any = None) -> ModelResponse:
        self.inputs.append(json.loads(json.dumps(input)))
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the tests run non-streamed")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def say(text: str, id: str) -> ResponseOutputMessage:
    """An assistant message the scripted model answers with."""
    return ResponseOutputMessage(id=id, type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])
