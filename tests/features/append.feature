@pure
Feature: session::append writes one entry onto the transcript tree
  Each append adds a message or a custom bookkeeping entry under the active
  leaf (or an explicit parent), moves the leaf to it, fires one
  on-message-added and, for messages only, counts it. A caller-chosen
  entry_id makes retries harmless.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "append"}
      """

  Scenario: the first append becomes the root of the tree
    # Prevents: a root entry pointing at a phantom parent, or a response that drops the null parent_id key.
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "hello"}], "timestamp": 42}}
      """
    Then the result is:
      """
      {"entry_id": "e_001", "parent_id": null, "timestamp": 1000000}
      """
    And the call delivered events "session::on-message-added"
    And the call delivered exactly "session::on-message-added":
      """
      {"session_id": "s_001", "entry_id": "e_001", "parent_id": null,
       "message": {"role": "user", "content": [{"type": "text", "text": "hello"}], "timestamp": 42},
       "timestamp": 1000000}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result is:
      """
      {"entry": {"kind": "message", "id": "e_001", "parent_id": null, "timestamp": 1000000, "revision": 0,
                 "message": {"role": "user", "content": [{"type": "text", "text": "hello"}], "timestamp": 42}}}
      """
    And the call delivered no events

  Scenario: later appends chain from the active leaf
    # Prevents: appends that all hang off the root (or off the oldest entry) instead of the newest one.
    Given I append user messages "one" to "s_001"
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "two"}], "timestamp": 42}}
      """
    Then the result is:
      """
      {"entry_id": "e_002", "parent_id": "e_001", "timestamp": 1000000}
      """
    And the call delivered "session::on-message-added" with:
      """
      {"entry_id": "e_002", "parent_id": "e_001"}
      """
    And the call delivered events "session::on-message-added"
    And reading the active path of "s_001" gives "e_001, e_002"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002"

  Scenario: an append bumps updated_at and message_count but not created_at
    # Prevents: list ordering by updated_at going stale, or a message_count that misses appends.
    Given the clock advances by 500 ms
    When I append user messages "counted" to "s_001"
    Then the call delivered events "session::on-message-added"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 1, "created_at": 1000000, "updated_at": 1000500}}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 1, "created_at": 1000000, "updated_at": 1000500}}
      """

  Scenario: replaying a caller-chosen entry_id returns the original and changes nothing
    # Prevents: a retried append duplicating the turn, overwriting it, re-firing it or re-counting it.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "entry_id": "turn1-user",
       "message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 42}}
      """
    And the clock advances by 700 ms
    When I call "session::append" with:
      """
      {"session_id": "s_001", "entry_id": "turn1-user",
       "message": {"role": "user", "content": [{"type": "text", "text": "a different text"}], "timestamp": 99}}
      """
    Then the result is:
      """
      {"entry_id": "turn1-user", "parent_id": null, "timestamp": 1000000}
      """
    And the call delivered no events
    And 1 "session::on-message-added" events were delivered in total
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 1, "updated_at": 1000000}}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "turn1-user"}
      """
    Then the result contains:
      """
      {"entry": {"timestamp": 1000000, "message": {"content": [{"type": "text", "text": "hi"}], "timestamp": 42}}}
      """
    And reading the active path of "s_001" gives "turn1-user"

  Scenario: a replay does not move the active leaf
    # Prevents: a late retry of an old turn re-parenting the conversation onto that old turn.
    Given these calls succeed:
      """
      [["session::append", {"session_id": "s_001", "entry_id": "a",
         "message": {"role": "user", "content": [{"type": "text", "text": "first"}], "timestamp": 42}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "second"}], "timestamp": 42}}]]
      """
    When I call "session::append" with:
      """
      {"session_id": "s_001", "entry_id": "a",
       "message": {"role": "user", "content": [{"type": "text", "text": "first"}], "timestamp": 42}}
      """
    Then the result is:
      """
      {"entry_id": "a", "parent_id": null, "timestamp": 1000000}
      """
    And the call delivered no events
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "third"}], "timestamp": 42}}
      """
    Then the result is:
      """
      {"entry_id": "e_002", "parent_id": "e_001", "timestamp": 1000000}
      """
    And the call delivered events "session::on-message-added"
    And reading the active path of "s_001" gives "a, e_001, e_002"
    When the store restarts
    Then reading the active path of "s_001" gives "a, e_001, e_002"

  Scenario: a replay is recognised before its parent_id is checked
    # Prevents: a retry failing with parent_not_found although the entry it names was already written.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "entry_id": "once",
       "message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 42}}
      """
    When I call "session::append" with:
      """
      {"session_id": "s_001", "entry_id": "once", "parent_id": "no-such-parent",
       "message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 42}}
      """
    Then the result is:
      """
      {"entry_id": "once", "parent_id": null, "timestamp": 1000000}
      """
    And the call delivered no events
    # The body is checked before the replay: a retry without a body is still a bad request.
    When I call "session::append" with:
      """
      {"session_id": "s_001", "entry_id": "once"}
      """
    Then the call fails with "session/invalid_request"
    And the call delivered no events
    And reading the active path of "s_001" gives "once"
    When the store restarts
    Then reading the active path of "s_001" gives "once"

  Scenario: an explicit parent starts a branch and moves the leaf onto it
    # Prevents: an edit-and-resend branch that is written but not made active, or that the next append ignores.
    Given I append user messages "one, two" to "s_001"
    When I call "session::append" with:
      """
      {"session_id": "s_001", "parent_id": "e_001",
       "message": {"role": "user", "content": [{"type": "text", "text": "two, edited"}], "timestamp": 42}}
      """
    Then the result is:
      """
      {"entry_id": "e_003", "parent_id": "e_001", "timestamp": 1000000}
      """
    And the call delivered "session::on-message-added" with:
      """
      {"entry_id": "e_003", "parent_id": "e_001"}
      """
    And the call delivered events "session::on-message-added"
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "three"}], "timestamp": 42}}
      """
    Then the result contains:
      """
      {"entry_id": "e_004", "parent_id": "e_003"}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_003, e_004"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 4}}
      """

  Scenario: an unknown parent is refused and nothing is written
    # Prevents: an orphan entry whose parent chain breaks every later read of the session.
    Given I append user messages "one" to "s_001"
    And the clock advances by 100 ms
    When I call "session::append" with:
      """
      {"session_id": "s_001", "parent_id": "e_404",
       "message": {"role": "user", "content": [{"type": "text", "text": "orphan"}], "timestamp": 42}}
      """
    Then the call fails with "session/parent_not_found"
    And the error message contains "e_404"
    And the call delivered no events
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 1, "updated_at": 1000000}}
      """
    And reading the active path of "s_001" gives "e_001"

  Scenario: the origin is stored, echoed on the event and shown on read items
    # Prevents: losing the caller's correlation data (turn ids) somewhere between the append and the UI.
    When I call "session::append" with:
      """
      {"session_id": "s_001", "origin": {"turn_id": "t_9"},
       "message": {"role": "user", "content": [{"type": "text", "text": "traced"}], "timestamp": 42}}
      """
    Then the call delivered exactly "session::on-message-added":
      """
      {"session_id": "s_001", "entry_id": "e_001", "parent_id": null,
       "message": {"role": "user", "content": [{"type": "text", "text": "traced"}], "timestamp": 42},
       "origin": {"turn_id": "t_9"}, "timestamp": 1000000}
      """
    And the result is:
      """
      {"entry_id": "e_001", "parent_id": null, "timestamp": 1000000}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"messages": [{"entry_id": "e_001", "origin": {"turn_id": "t_9"},
                     "message": {"role": "user", "content": [{"type": "text", "text": "traced"}], "timestamp": 42}}]}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"origin": {"turn_id": "t_9"}}}
      """

  Scenario: all four roles round-trip field for field
    # Prevents: a role-specific field being dropped, defaulted wrongly, or an absent optional being invented.
    Given these calls succeed:
      """
      [["session::append", {"session_id": "s_001", "message":
         {"role": "user", "content": [{"type": "text", "text": "run ls"}], "timestamp": 1}}],
       ["session::append", {"session_id": "s_001", "message":
         {"role": "assistant", "content": [{"type": "function_call", "id": "c1", "function_id": "shell::run", "arguments": {"cmd": "ls"}}],
          "stop_reason": "function_call", "model": "m-1", "provider": "p-1", "usage": {"input": 10}, "timestamp": 2}}],
       ["session::append", {"session_id": "s_001", "message":
         {"role": "function_result", "function_call_id": "c1", "function_id": "shell::run",
          "content": [{"type": "text", "text": "README.md"}], "details": {"code": 0}, "timestamp": 3}}],
       ["session::append", {"session_id": "s_001", "message":
         {"role": "custom", "custom_type": "notice", "display": "Pinned", "content": [{"type": "text", "text": "pinned"}], "timestamp": 4}}]]
      """
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"messages": [
        {"entry_id": "e_001", "message": {"role": "user", "content": [{"type": "text", "text": "run ls"}], "timestamp": 1}},
        {"entry_id": "e_002", "message": {"role": "assistant",
          "content": [{"type": "function_call", "id": "c1", "function_id": "shell::run", "arguments": {"cmd": "ls"}}],
          "stop_reason": "function_call", "model": "m-1", "provider": "p-1", "usage": {"input": 10}, "timestamp": 2}},
        {"entry_id": "e_003", "message": {"role": "function_result", "function_call_id": "c1", "function_id": "shell::run",
          "content": [{"type": "text", "text": "README.md"}], "details": {"code": 0}, "is_error": false, "timestamp": 3}},
        {"entry_id": "e_004", "message": {"role": "custom", "custom_type": "notice", "display": "Pinned",
          "content": [{"type": "text", "text": "pinned"}], "timestamp": 4}}]}
      """
    And the call delivered no events
    And 4 "session::on-message-added" events were delivered in total

  Scenario: every content block type round-trips byte for byte
    # Prevents: a block type being reshaped, its optional fields lost, or nested results flattened.
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "assistant", "stop_reason": "end", "model": "m-1", "provider": "p-1", "timestamp": 7,
        "content": [
          {"type": "text", "text": "look"},
          {"type": "image", "mime": "image/png", "data": "aGVsbG8="},
          {"type": "file", "attachment_id": "a_777", "name": "notes.txt", "mime": "text/plain", "size": 12},
          {"type": "thinking", "text": "hmm", "signature": "sig-1"},
          {"type": "function_call", "id": "c9", "function_id": "math::add", "arguments": {"a": 1, "b": [2, 3]}},
          {"type": "function_result", "function_call_id": "c9", "is_error": false,
           "content": [{"type": "text", "text": "5"}, {"type": "image", "mime": "image/jpeg", "data": "AAAA", "attachment_id": "a_778"}]}]}}
      """
    Then the call succeeds
    And the call delivered events "session::on-message-added"
    And the result is:
      """
      {"entry_id": "e_001", "parent_id": null, "timestamp": 1000000}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result at "entry.message.content" is:
      """
      [
        {"type": "text", "text": "look"},
        {"type": "image", "mime": "image/png", "data": "aGVsbG8="},
        {"type": "file", "attachment_id": "a_777", "name": "notes.txt", "mime": "text/plain", "size": 12},
        {"type": "thinking", "text": "hmm", "signature": "sig-1"},
        {"type": "function_call", "id": "c9", "function_id": "math::add", "arguments": {"a": 1, "b": [2, 3]}},
        {"type": "function_result", "function_call_id": "c9", "is_error": false,
         "content": [{"type": "text", "text": "5"}, {"type": "image", "mime": "image/jpeg", "data": "AAAA", "attachment_id": "a_778"}]}]
      """
    And the call delivered no events

  Scenario: a custom entry fires with `custom`, moves the leaf and is not counted
    # Prevents: bookkeeping records inflating message_count or posing as messages to role-filtered observers.
    Given I append user messages "one" to "s_001"
    And the clock advances by 300 ms
    When I call "session::append" with:
      """
      {"session_id": "s_001", "custom": {"custom_type": "compaction", "data": {"summary": "short", "tail_start_entry_id": "e_001"}}}
      """
    Then the result is:
      """
      {"entry_id": "e_002", "parent_id": "e_001", "timestamp": 1000300}
      """
    And the call delivered events "session::on-message-added"
    And the call delivered exactly "session::on-message-added":
      """
      {"session_id": "s_001", "entry_id": "e_002", "parent_id": "e_001",
       "custom": {"custom_type": "compaction", "data": {"summary": "short", "tail_start_entry_id": "e_001"}},
       "timestamp": 1000300}
      """
    When I append user messages "two" to "s_001"
    Then the call delivered events "session::on-message-added"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_003"}
      """
    Then the result contains:
      """
      {"entry": {"parent_id": "e_002"}}
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 2, "updated_at": 1000300}}
      """

  Scenario: a custom entry without data stores data as null
    # Prevents: a missing `data` key breaking readers that expect the field on every custom entry.
    When I call "session::append" with:
      """
      {"session_id": "s_001", "custom": {"custom_type": "marker"}}
      """
    Then the result is:
      """
      {"entry_id": "e_001", "parent_id": null, "timestamp": 1000000}
      """
    And the call delivered "session::on-message-added" with:
      """
      {"custom": {"custom_type": "marker", "data": null}, "message": "<absent>"}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result is:
      """
      {"entry": {"kind": "custom", "id": "e_001", "parent_id": null, "timestamp": 1000000, "revision": 0,
                 "custom_type": "marker", "data": null}}
      """
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 0}}
      """

  Scenario Outline: an append needs exactly one of message and custom
    # Prevents: an entry with no body, or an ambiguous one, reaching the log.
    When I call "session::append" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the call delivered no events
    And reading the active path of "s_001" gives ""
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 0, "updated_at": 1000000}}
      """

    Examples:
      | payload |
      | {"session_id": "s_001"} |
      | {"session_id": "s_001", "entry_id": "x", "message": {"role": "user", "content": [], "timestamp": 1}, "custom": {"custom_type": "c"}} |

  Scenario: an append to an unknown session is refused before anything else
    # Prevents: appends creating a session implicitly, or a body error masking the missing session.
    When I call "session::append" with:
      """
      {"session_id": "s_999"}
      """
    Then the call fails with "session/not_found"
    And the error message contains "s_999"
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_999"}
      """
    Then the result is null
    And the file of session "s_999" does not exist

  Scenario: the entry timestamp is the worker clock, not the message's own
    # Prevents: client-supplied (skewed) timestamps ordering or dating the log.
    Given the clock is at 2000000
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "t"}], "timestamp": 5}}
      """
    Then the result contains:
      """
      {"timestamp": 2000000}
      """
    And the call delivered "session::on-message-added" with:
      """
      {"timestamp": 2000000, "message": {"timestamp": 5}}
      """
    And the call delivered events "session::on-message-added"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"timestamp": 2000000, "message": {"timestamp": 5}}}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"timestamp": 2000000, "message": {"timestamp": 5}}}
      """
