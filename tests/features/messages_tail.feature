@pure
Feature: session::messages-tail pages the active path backwards in blocks
  A chat view opens at the newest page and walks back with before_entry_id.
  The unit of a page is a block: a run of tool activity (calls, results,
  wakes) is one block and is never split; anything else is a block of its
  own. Inside a run only the last call and its results come back whole; the
  rest are light placeholders marked elided.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "tail"}
      """

  Scenario: the newest blocks come first and before_entry_id walks back to the start
    # Prevents: a chat opening at the oldest page, or paging backwards skipping or repeating blocks.
    Given I append user messages "e1" to "s_001"
    And I append tool call pairs "c1" to "s_001"
    And I append the assistant reply "e4" to "s_001"
    And I append user messages "e5" to "s_001"
    And I append the assistant reply "e6" to "s_001"
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "limit": 2}
      """
    Then the entry ids at "messages" are "e_005, e_006"
    And the result contains:
      """
      {"has_more": true, "oldest_entry_id": "e_005"}
      """
    And the call delivered no events
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "limit": 2, "before_entry_id": "e_005"}
      """
    Then the entry ids at "messages" are "e_002, e_003, e_004"
    And the result contains:
      """
      {"has_more": true, "oldest_entry_id": "e_002"}
      """
    When the store restarts
    And I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "limit": 2, "before_entry_id": "e_002"}
      """
    Then the entry ids at "messages" are "e_001"
    And the result contains:
      """
      {"has_more": false, "oldest_entry_id": "e_001"}
      """
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "limit": 2, "before_entry_id": "e_001"}
      """
    Then the result is:
      """
      {"messages": [], "has_more": false}
      """

  Scenario: an activity run is one block however long it is
    # Prevents: a page boundary cutting a tool call from its result.
    Given I append user messages "start" to "s_001"
    And I append tool call pairs "c1, c2, c3" to "s_001"
    And I append the assistant reply "all done" to "s_001"
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "limit": 1}
      """
    Then the entry ids at "messages" are "e_008"
    And the result contains:
      """
      {"has_more": true, "oldest_entry_id": "e_008"}
      """
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "limit": 1, "before_entry_id": "e_008"}
      """
    Then the entry ids at "messages" are "e_002, e_003, e_004, e_005, e_006, e_007"
    And the result contains:
      """
      {"has_more": true, "oldest_entry_id": "e_002",
       "messages": [{"elided": true}, {"elided": true}, {"elided": true}, {"elided": true},
                    {"elided": "<absent>"}, {"elided": "<absent>"}]}
      """
    And the call delivered no events

  Scenario: a collapsed run keeps the last call whole and reduces the rest to placeholders
    # Prevents: long tool loops shipping every argument and output, or placeholders losing the ids needed to fetch them.
    Given these calls succeed:
      """
      [["session::append", {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "q"}], "timestamp": 1}}],
       ["session::append", {"session_id": "s_001", "message": {"role": "assistant", "stop_reason": "function_call", "model": "m", "provider": "p", "timestamp": 2,
          "content": [{"type": "thinking", "text": "plan"}, {"type": "text", "text": "step one"},
                      {"type": "function_call", "id": "c1", "function_id": "shell::run", "arguments": {"cmd": "ls"}}]}}],
       ["session::append", {"session_id": "s_001", "message": {"role": "function_result", "function_call_id": "c1", "function_id": "shell::run",
          "content": [{"type": "text", "text": "README.md"}], "details": {"code": 0}, "timestamp": 3}}],
       ["session::append", {"session_id": "s_001", "message": {"role": "assistant", "stop_reason": "function_call", "model": "m", "provider": "p", "timestamp": 4,
          "content": [{"type": "thinking", "text": "again"}, {"type": "function_call", "id": "c2", "function_id": "shell::run", "arguments": {"cmd": "ls"}}]}}],
       ["session::append", {"session_id": "s_001", "message": {"role": "function_result", "function_call_id": "c2", "function_id": "shell::run",
          "content": [{"type": "text", "text": "README.md"}], "details": {"code": 0}, "timestamp": 5}}],
       ["session::append", {"session_id": "s_001", "message": {"role": "assistant", "stop_reason": "end", "model": "m", "provider": "p", "timestamp": 6,
          "content": [{"type": "text", "text": "done"}]}}]]
      """
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"has_more": false, "oldest_entry_id": "e_001", "messages": [
        {"entry_id": "e_001", "message": {"role": "user", "content": [{"type": "text", "text": "q"}], "timestamp": 1}},
        {"entry_id": "e_002", "elided": true, "message": {"role": "assistant", "stop_reason": "function_call", "model": "m", "provider": "p", "timestamp": 2,
          "content": [{"type": "text", "text": "step one"}, {"type": "function_call", "id": "c1", "function_id": "shell::run", "arguments": {}}]}},
        {"entry_id": "e_003", "elided": true, "message": {"role": "function_result", "function_call_id": "c1", "function_id": "shell::run",
          "content": [], "details": null, "is_error": false, "timestamp": 3}},
        {"entry_id": "e_004", "message": {"role": "assistant", "stop_reason": "function_call", "model": "m", "provider": "p", "timestamp": 4,
          "content": [{"type": "thinking", "text": "again"}, {"type": "function_call", "id": "c2", "function_id": "shell::run", "arguments": {"cmd": "ls"}}]}},
        {"entry_id": "e_005", "message": {"role": "function_result", "function_call_id": "c2", "function_id": "shell::run",
          "content": [{"type": "text", "text": "README.md"}], "details": {"code": 0}, "is_error": false, "timestamp": 5}},
        {"entry_id": "e_006", "message": {"role": "assistant", "stop_reason": "end", "model": "m", "provider": "p", "timestamp": 6,
          "content": [{"type": "text", "text": "done"}]}}]}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "messages.1.message.content.0" is:
      """
      {"type": "thinking", "text": "plan"}
      """
    And the result at "messages.2.message.details" is:
      """
      {"code": 0}
      """

  Scenario: a wake joins the run it starts and is always kept whole
    # Prevents: trigger wake-ups splitting runs or being elided away as if they were tool output.
    Given I append user messages "hi" to "s_001"
    And I call "session::append" with:
      """
      {"session_id": "s_001", "origin": {"notification": true},
       "message": {"role": "user", "content": [{"type": "text", "text": "timer fired"}], "timestamp": 1}}
      """
    And I append tool call pairs "c1, c2" to "s_001"
    And I append the assistant reply "checked" to "s_001"
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "limit": 2}
      """
    Then the entry ids at "messages" are "e_002, e_003, e_004, e_005, e_006, e_007"
    And the result contains:
      """
      {"has_more": true, "oldest_entry_id": "e_002",
       "messages": [{"elided": "<absent>", "origin": {"notification": true}}, {"elided": true}, {"elided": true},
                    {"elided": "<absent>"}, {"elided": "<absent>"}, {"elided": "<absent>"}]}
      """
    And the call delivered no events

  Scenario: until_entry_id widens the page back to a deep-linked entry
    # Prevents: a deep link into history opening a page that does not contain its target.
    Given I append user messages "e1" to "s_001"
    And I append tool call pairs "c1, c2" to "s_001"
    And I append the assistant reply "e6" to "s_001"
    And I append user messages "e7" to "s_001"
    And I append the assistant reply "e8" to "s_001"
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "limit": 1, "until_entry_id": "e_003"}
      """
    Then the entry ids at "messages" are "e_002, e_003, e_004, e_005, e_006, e_007, e_008"
    And the result contains:
      """
      {"has_more": true, "oldest_entry_id": "e_002"}
      """
    And the call delivered no events
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "limit": 2, "until_entry_id": "e_008"}
      """
    Then the entry ids at "messages" are "e_007, e_008"

  Scenario: anchors that left the active path are refused
    # Prevents: a view that kept an old anchor after a branch switch silently paging another branch.
    Given I append user messages "one, two, three" to "s_001"
    And I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "before_entry_id": "e_002"}
      """
    Then the call fails with "session/invalid_cursor"
    And the error message contains "before_entry_id e_002"
    And the call delivered no events
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "until_entry_id": "e_002"}
      """
    Then the call fails with "session/invalid_cursor"
    And the error message contains "until_entry_id e_002"
    And the call delivered no events
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"messages": [{"entry_id": "e_001", "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 42}}],
       "has_more": false, "oldest_entry_id": "e_001"}
      """

  Scenario: custom entries are in by default, split runs, and dropping them merges runs
    # Prevents: compaction markers vanishing from the transcript, or blocks computed before the custom filter.
    Given I append user messages "e1" to "s_001"
    And I append tool call pairs "c1" to "s_001"
    And I call "session::append" with:
      """
      {"session_id": "s_001", "origin": {"by": "compactor"}, "custom": {"custom_type": "compaction", "data": {"summary": "s"}}}
      """
    And I append tool call pairs "c2" to "s_001"
    And I append the assistant reply "e7" to "s_001"
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001, e_002, e_003, e_004, e_005, e_006, e_007"
    And the result at "messages.3" is:
      """
      {"entry_id": "e_004", "custom": {"custom_type": "compaction", "data": {"summary": "s"}}}
      """
    And the result contains:
      """
      {"messages": [{"elided": "<absent>"}, {"elided": "<absent>"}, {"elided": "<absent>"}, {"elided": "<absent>"},
                    {"elided": "<absent>"}, {"elided": "<absent>"}, {"elided": "<absent>"}]}
      """
    And the call delivered no events
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "include_custom": false}
      """
    Then the entry ids at "messages" are "e_001, e_002, e_003, e_005, e_006, e_007"
    And the result contains:
      """
      {"messages": [{"elided": "<absent>"}, {"elided": true}, {"elided": true},
                    {"elided": "<absent>"}, {"elided": "<absent>"}, {"elided": "<absent>"}]}
      """
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "include_custom": false, "before_entry_id": "e_004"}
      """
    Then the call fails with "session/invalid_cursor"
    And the call delivered no events

  Scenario: an empty session is an empty last page; an unknown session is an error
    # Prevents: a fresh chat looping on has_more, or a deleted chat reading as empty.
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "before_entry_id": "e_404"}
      """
    Then the result is:
      """
      {"messages": [], "has_more": false}
      """
    And the call delivered no events
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_404"}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events

  Scenario: include_image_data false blanks linked images after elision
    # Prevents: the light tail read still shipping image bytes that have a stored original.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "timestamp": 1, "content": [
        {"type": "image", "mime": "image/png", "data": "aGVsbG8=", "attachment_id": "a_001"},
        {"type": "image", "mime": "image/png", "data": "aW5saW5l"}]}}
      """
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "include_image_data": false}
      """
    Then the result at "messages.0.message.content" is:
      """
      [{"type": "image", "mime": "image/png", "data": "", "attachment_id": "a_001"},
       {"type": "image", "mime": "image/png", "data": "aW5saW5l"}]
      """
    And the call delivered no events
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "messages.0.message.content.0.data" is:
      """
      "aGVsbG8="
      """

  Scenario Outline: walking back page by page at limit <limit> rebuilds the whole transcript
    # Prevents: a block lost or duplicated at a page boundary for some page size.
    Given I append user messages "hello" to "s_001"
    And I append tool call pairs "c1, c2" to "s_001"
    And I call "session::append" with:
      """
      {"session_id": "s_001", "custom": {"custom_type": "compaction", "data": null}}
      """
    And I append the assistant reply "so far" to "s_001"
    And I append user messages "more" to "s_001"
    And I append tool call pairs "c3" to "s_001"
    And I call "session::append" with:
      """
      {"session_id": "s_001", "custom": {"custom_type": "trigger_fired", "data": {"t": 1}}}
      """
    And I append tool call pairs "c4" to "s_001"
    And I append the assistant reply "finished" to "s_001"
    Then walking "s_001" back with messages-tail at limit <limit> reproduces its messages

    Examples:
      | limit |
      | 1     |
      | 2     |
      | 50    |
