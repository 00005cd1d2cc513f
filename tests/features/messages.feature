@pure
Feature: session::messages reads the active path oldest first
  The path is the parent chain from the active leaf (or from_entry_id) back
  to the root, reversed. Roles filter messages; custom entries appear only
  when asked for; cursors page through the filtered path.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "reader"}
      """

  Scenario: an empty session reads as an empty page, whatever the cursor says
    # Prevents: a fresh chat view erroring, or emitting a cursor to nowhere.
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"messages": []}
      """
    And the call delivered no events
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "cursor": "!!garbage!!", "after_entry_id": "e_404"}
      """
    Then the result is:
      """
      {"messages": []}
      """

  Scenario: messages come back oldest first with their entry ids
    # Prevents: newest-first output or items that cannot be tied back to entries.
    Given I append user messages "one, two, three" to "s_001"
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"messages": [
        {"entry_id": "e_001", "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 42}},
        {"entry_id": "e_002", "message": {"role": "user", "content": [{"type": "text", "text": "two"}], "timestamp": 42}},
        {"entry_id": "e_003", "message": {"role": "user", "content": [{"type": "text", "text": "three"}], "timestamp": 42}}]}
      """
    And the call delivered no events

  Scenario: the path follows parent links, not timestamps, and skips abandoned branches
    # Prevents: a view sorted by time that interleaves an abandoned branch with the live one.
    Given I append user messages "one, two" to "s_001"
    And the clock advances by 1000 ms
    And I call "session::append" with:
      """
      {"session_id": "s_001", "parent_id": "e_001", "message": {"role": "user", "content": [{"type": "text", "text": "two b"}], "timestamp": 42}}
      """
    And I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001, e_002"
    And the call delivered no events

  Scenario: a roles filter keeps only those roles
    # Prevents: a user-only history (for search, titles) containing assistant turns.
    Given I append user messages "q1" to "s_001"
    And I append the assistant reply "a1" to "s_001"
    And I append user messages "q2" to "s_001"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "roles": ["user"]}
      """
    Then the entry ids at "messages" are "e_001, e_003"
    And the result has no "next_cursor"
    And the call delivered no events
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "roles": ["assistant", "function_result"]}
      """
    Then the entry ids at "messages" are "e_002"

  Scenario: custom entries are hidden unless include_custom asks for them
    # Prevents: bookkeeping records showing up in chat views, or vanishing from tools that need them.
    Given I append user messages "one" to "s_001"
    And I call "session::append" with:
      """
      {"session_id": "s_001", "origin": {"by": "compactor"}, "custom": {"custom_type": "compaction", "data": {"summary": "s"}}}
      """
    And I append user messages "two" to "s_001"
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001, e_003"
    And the call delivered no events
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "include_custom": true}
      """
    Then the entry ids at "messages" are "e_001, e_002, e_003"
    And the result at "messages.1" is:
      """
      {"entry_id": "e_002", "custom": {"custom_type": "compaction", "data": {"summary": "s"}}}
      """

  Scenario: a roles filter drops custom entries even with include_custom
    # Prevents: a role-filtered read returning records that have no role at all.
    Given I append user messages "one" to "s_001"
    And I call "session::append" with:
      """
      {"session_id": "s_001", "custom": {"custom_type": "marker", "data": 1}}
      """
    And I append the assistant reply "a" to "s_001"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "roles": ["user", "assistant"], "include_custom": true}
      """
    Then the entry ids at "messages" are "e_001, e_003"
    And the call delivered no events

  Scenario: from_entry_id reads the path ending at any entry, on any branch
    # Prevents: abandoned branches becoming unreadable once the leaf moves away.
    Given I append user messages "one, two, three" to "s_001"
    And I call "session::append" with:
      """
      {"session_id": "s_001", "parent_id": "e_001", "message": {"role": "user", "content": [{"type": "text", "text": "b"}], "timestamp": 42}}
      """
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_002"}
      """
    Then the entry ids at "messages" are "e_001, e_002"
    And the call delivered no events
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_003"}
      """
    Then the entry ids at "messages" are "e_001, e_002, e_003"
    And reading the active path of "s_001" gives "e_001, e_004"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_404"}
      """
    Then the call fails with "session/entry_not_found"
    And the call delivered no events

  Scenario: a cursor pages through five entries two at a time
    # Prevents: gaps or repeats between pages, and a cursor on the last page inviting an empty fetch.
    Given I append user messages "1, 2, 3, 4, 5" to "s_001"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "limit": 2}
      """
    Then the entry ids at "messages" are "e_001, e_002"
    And the result at "next_cursor" is:
      """
      "eyJpZCI6ImVfMDAyIn0="
      """
    And the call delivered no events
    When I remember "next_cursor" as "c1"
    And I call "session::messages" with:
      """
      {"session_id": "s_001", "limit": 2, "cursor": "${c1}"}
      """
    Then the entry ids at "messages" are "e_003, e_004"
    When I remember "next_cursor" as "c2"
    And the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001", "limit": 2, "cursor": "${c2}"}
      """
    Then the entry ids at "messages" are "e_005"
    And the result has no "next_cursor"

  Scenario: a limit of zero still returns one message
    # Prevents: an empty page with a next_cursor that never advances.
    Given I append user messages "1, 2" to "s_001"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "limit": 0}
      """
    Then the entry ids at "messages" are "e_001"
    And the result contains:
      """
      {"next_cursor": "eyJpZCI6ImVfMDAxIn0="}
      """
    And the call delivered no events

  Scenario: a cursor that is not on the filtered path is refused
    # Prevents: resuming at a wrong position after the branch moved or the filters changed.
    Given I append user messages "q1" to "s_001"
    And I append the assistant reply "a1" to "s_001"
    And I append user messages "q2" to "s_001"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "roles": ["assistant"], "cursor": "eyJpZCI6ImVfMDAxIn0="}
      """
    Then the call fails with "session/invalid_cursor"
    And the error message contains "e_001"
    And the call delivered no events
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "limit": 1, "cursor": "eyJpZCI6ImVfMDAyIn0="}
      """
    Then the entry ids at "messages" are "e_003"
    When I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result is:
      """
      {"active_leaf": "e_001"}
      """
    And the call delivered no events
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "cursor": "eyJpZCI6ImVfMDAyIn0="}
      """
    Then the call fails with "session/invalid_cursor"
    And the call delivered no events
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "cursor": "!!garbage!!"}
      """
    Then the call fails with "session/invalid_cursor"
    And the error message contains "base64"
    And the call delivered no events
    When the store restarts
    Then reading the active path of "s_001" gives "e_001"

  Scenario: after_entry_id resumes after that entry unless a cursor is given
    # Prevents: a client catching up from its last seen entry receiving that entry again.
    Given I append user messages "1, 2, 3, 4" to "s_001"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "after_entry_id": "e_002"}
      """
    Then the entry ids at "messages" are "e_003, e_004"
    And the call delivered no events
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "after_entry_id": "e_001", "cursor": "eyJpZCI6ImVfMDAzIn0="}
      """
    Then the entry ids at "messages" are "e_004"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "after_entry_id": "e_404"}
      """
    Then the call fails with "session/invalid_cursor"
    And the error message contains "after_entry_id"
    And the call delivered no events

  Scenario: include_image_data false blanks only images linked to a stored original
    # Prevents: light reads dropping inline-only images (which have no other copy) or mutating storage.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "timestamp": 1, "content": [
        {"type": "image", "mime": "image/png", "data": "aGVsbG8=", "attachment_id": "a_001"},
        {"type": "image", "mime": "image/png", "data": "aW5saW5l"},
        {"type": "function_result", "function_call_id": "c", "content": [
          {"type": "image", "mime": "image/png", "data": "bmVzdGVk", "attachment_id": "a_002"}]}]}}
      """
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "include_image_data": false}
      """
    Then the result at "messages.0.message.content" is:
      """
      [{"type": "image", "mime": "image/png", "data": "", "attachment_id": "a_001"},
       {"type": "image", "mime": "image/png", "data": "aW5saW5l"},
       {"type": "function_result", "function_call_id": "c", "content": [
         {"type": "image", "mime": "image/png", "data": "", "attachment_id": "a_002"}]}]
      """
    And the call delivered no events
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "messages.0.message.content.0.data" is:
      """
      "aGVsbG8="
      """
    And the result at "messages.0.message.content.2.content.0.data" is:
      """
      "bmVzdGVk"
      """

  Scenario: an unknown session is refused before cursors are looked at
    # Prevents: a deleted session reading as an empty transcript, or a cursor error masking the real cause.
    When I call "session::messages" with:
      """
      {"session_id": "s_404", "cursor": "!!garbage!!"}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events
