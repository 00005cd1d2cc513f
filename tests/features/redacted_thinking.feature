@pure
Feature: redacted_thinking content blocks round-trip untouched
  Providers may return reasoning encrypted, as a block of type
  redacted_thinking carrying opaque data that must be sent back to the
  provider exactly as received. The harness writes such blocks, so the store
  accepts them beside the golden block types, keeps them through a restart
  and hands them back unchanged on every read and in events.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "reasoning"}
      """

  Scenario: an assistant reply with a redacted_thinking block is stored and read back byte for byte
    # Prevents: the harness's encrypted reasoning being refused, dropped or altered, which breaks the next provider turn.
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "assistant", "stop_reason": "end", "model": "m", "provider": "p",
       "timestamp": 7, "content": [
        {"type": "thinking", "text": "plan", "signature": "sig"},
        {"type": "redacted_thinking", "data": "EqQBCgIYAhIM+/=opaque ünïcode"},
        {"type": "text", "text": "Done."}]}}
      """
    Then the call succeeds
    And the call delivered events "session::on-message-added"
    And the call delivered "session::on-message-added" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "message": {"content": [
        {"type": "thinking", "text": "plan", "signature": "sig"},
        {"type": "redacted_thinking", "data": "EqQBCgIYAhIM+/=opaque ünïcode"},
        {"type": "text", "text": "Done."}]}}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result at "entry.message.content" is:
      """
      [{"type": "thinking", "text": "plan", "signature": "sig"},
       {"type": "redacted_thinking", "data": "EqQBCgIYAhIM+/=opaque ünïcode"},
       {"type": "text", "text": "Done."}]
      """
    And the call delivered no events
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "messages.0.message.content.1" is:
      """
      {"type": "redacted_thinking", "data": "EqQBCgIYAhIM+/=opaque ünïcode"}
      """

  Scenario: a streamed update may carry a redacted_thinking block
    # Prevents: update-message refusing a block append accepts, so a reply could start but never finish.
    Given I append an empty assistant message to "s_001"
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "redacted_thinking", "data": "b3BhcXVl"}]}
      """
    Then the call succeeds
    And the call delivered "session::on-message-updated" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "revision": 1,
       "message": {"content": [{"type": "redacted_thinking", "data": "b3BhcXVl"}]}}
      """
    And the call delivered events "session::on-message-updated"
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result at "entry.message.content" is:
      """
      [{"type": "redacted_thinking", "data": "b3BhcXVl"}]
      """
    And the result at "entry.revision" is:
      """
      1
      """

  Scenario: a redacted_thinking block without its data is refused, naming the field, and nothing is written
    # Prevents: storing a block that can never be sent back to the provider, or a half-applied append.
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "assistant", "stop_reason": "end", "model": "m", "provider": "p",
       "timestamp": 7, "content": [{"type": "redacted_thinking"}]}}
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "data"
    And the call delivered no events
    And reading the active path of "s_001" gives ""
    When the store restarts
    Then reading the active path of "s_001" gives ""
