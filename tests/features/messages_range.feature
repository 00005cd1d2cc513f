@pure
Feature: session::messages-range fetches whole entries behind placeholders
  A reader that got elided placeholders from messages-tail asks for the full
  entries, either as an inclusive span of the active path or as a list of
  ids. Results are in path order, never elided, and paged by entry count.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "range"}
      """
    And I append user messages "e1" to "s_001"
    And I append tool call pairs "c1, c2, c3" to "s_001"
    And I append the assistant reply "e8" to "s_001"

  Scenario: an inclusive span comes back whole, page by page
    # Prevents: an off-by-one at either end of the span, or placeholders coming back instead of full entries.
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_002", "to_entry_id": "e_007", "limit": 4}
      """
    Then the entry ids at "messages" are "e_002, e_003, e_004, e_005"
    And the result contains:
      """
      {"messages": [
        {"elided": "<absent>", "message": {"content": [{"type": "thinking", "text": "why c1"},
          {"type": "function_call", "id": "c1", "function_id": "shell::run", "arguments": {"cmd": "ls"}}]}},
        {"elided": "<absent>", "message": {"content": [{"type": "text", "text": "README.md"}], "details": {"code": 0}}},
        {"elided": "<absent>"}, {"elided": "<absent>"}],
       "next_cursor": "eyJpZCI6ImVfMDA1In0="}
      """
    And the call delivered no events
    When I remember "next_cursor" as "more"
    And the store restarts
    And I call "session::messages-range" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_002", "to_entry_id": "e_007", "limit": 4, "cursor": "${more}"}
      """
    Then the entry ids at "messages" are "e_006, e_007"
    And the result has no "next_cursor"

  Scenario: a span whose ends coincide is a single entry
    # Prevents: from == to being treated as empty or as an error.
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_008", "to_entry_id": "e_008"}
      """
    Then the result is:
      """
      {"messages": [{"entry_id": "e_008", "message": {"role": "assistant", "content": [{"type": "text", "text": "e8"}],
        "stop_reason": "end", "model": "m-1", "provider": "p-1", "timestamp": 42}}]}
      """
    And the call delivered no events

  Scenario: an id list is returned in path order with duplicates folded
    # Prevents: results in request order (breaking splice-in) or the same entry rendered twice.
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_006", "e_002", "e_006"]}
      """
    Then the entry ids at "messages" are "e_002, e_006"
    And the result has no "next_cursor"
    And the call delivered no events
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": []}
      """
    Then the result is:
      """
      {"messages": []}
      """

  Scenario: custom entries on the path are part of a span
    # Prevents: a span silently shrinking around bookkeeping records that the tail showed.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "custom": {"custom_type": "compaction", "data": {"n": 2}}}
      """
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_008", "to_entry_id": "e_009"}
      """
    Then the entry ids at "messages" are "e_008, e_009"
    And the result at "messages.1" is:
      """
      {"entry_id": "e_009", "custom": {"custom_type": "compaction", "data": {"n": 2}}}
      """
    And the call delivered no events

  Scenario Outline: a request without exactly one selector is refused: <case>
    # Prevents: a half-specified range guessing an end and returning the wrong slice.
    When I call "session::messages-range" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the call delivered no events

    Examples:
      | case              | payload |
      | only from         | {"session_id": "s_001", "from_entry_id": "e_002"} |
      | only to           | {"session_id": "s_001", "to_entry_id": "e_002"} |
      | span and list     | {"session_id": "s_001", "from_entry_id": "e_002", "to_entry_id": "e_003", "entry_ids": ["e_002"]} |
      | no selector       | {"session_id": "s_001"} |
      | from after to     | {"session_id": "s_001", "from_entry_id": "e_002", "to_entry_id": "e_001"} |

  Scenario: unknown ids, unknown sessions and off-path ids each get their own error
    # Prevents: a reader unable to tell "never existed" from "the branch moved, reload".
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_404"]}
      """
    Then the call fails with "session/entry_not_found"
    And the call delivered no events
    When I call "session::messages-range" with:
      """
      {"session_id": "s_404", "entry_ids": ["e_404"]}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events
    When I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result is:
      """
      {"active_leaf": "e_001"}
      """
    And the call delivered no events
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_002"]}
      """
    Then the call fails with "session/invalid_cursor"
    And the error message contains "not on the active path"
    And the call delivered no events
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_001", "to_entry_id": "e_003"}
      """
    Then the call fails with "session/invalid_cursor"
    And the call delivered no events
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_001"]}
      """
    Then the entry ids at "messages" are "e_001"
    When the store restarts
    And I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_001"]}
      """
    Then the entry ids at "messages" are "e_001"

  Scenario: a cursor outside the selection is refused
    # Prevents: a cursor from another range resuming at a position that is not part of this one.
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_002", "e_004"], "cursor": "eyJpZCI6ImVfMDAzIn0="}
      """
    Then the call fails with "session/invalid_cursor"
    And the call delivered no events
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_002", "e_004"], "cursor": "eyJpZCI6ImVfMDAyIn0="}
      """
    Then the entry ids at "messages" are "e_004"

  Scenario: include_image_data false blanks linked images in a range
    # Prevents: the range read ignoring the light-read switch every other reader honours.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "timestamp": 1, "content": [
        {"type": "image", "mime": "image/png", "data": "aGVsbG8=", "attachment_id": "a_001"}]}}
      """
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_009"], "include_image_data": false}
      """
    Then the result at "messages.0.message.content" is:
      """
      [{"type": "image", "mime": "image/png", "data": "", "attachment_id": "a_001"}]
      """
    And the call delivered no events
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_009"]}
      """
    Then the result at "messages.0.message.content.0.data" is:
      """
      "aGVsbG8="
      """
