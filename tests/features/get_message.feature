@pure
Feature: session::get-message reads one entry by id
  The full stored envelope of any entry of the session, on any branch,
  message or custom. Unknown sessions and entries read as null, not errors.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "one entry"}
      """

  Scenario: a message entry comes back as its full envelope
    # Prevents: a single-entry refresh missing the revision, parent or origin a list item would carry.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "origin": {"turn_id": "t_1"},
       "message": {"role": "user", "content": [{"type": "text", "text": "hello"}], "timestamp": 3}}
      """
    And I append the assistant reply "hi" to "s_001"
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result is:
      """
      {"entry": {"kind": "message", "id": "e_002", "parent_id": "e_001", "timestamp": 1000000, "revision": 0,
                 "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}], "stop_reason": "end",
                             "model": "m-1", "provider": "p-1", "timestamp": 42}}}
      """
    And the call delivered no events
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"parent_id": null, "origin": {"turn_id": "t_1"}}}
      """

  Scenario: a custom entry comes back with its type, data and origin
    # Prevents: custom entries being unreadable by id, or their origin being lost with them.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "origin": {"by": "compactor"}, "custom": {"custom_type": "compaction", "data": {"summary": "s"}}}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result is:
      """
      {"entry": {"kind": "custom", "id": "e_001", "parent_id": null, "timestamp": 1000000, "revision": 0,
                 "origin": {"by": "compactor"}, "custom_type": "compaction", "data": {"summary": "s"}}}
      """
    And the call delivered no events

  Scenario: entries on an abandoned branch stay readable
    # Prevents: edit-and-resend making the superseded answer disappear from history views.
    Given I append user messages "one, two, three" to "s_001"
    And I call "session::append" with:
      """
      {"session_id": "s_001", "parent_id": "e_001", "message": {"role": "user", "content": [{"type": "text", "text": "two b"}], "timestamp": 42}}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_003"}
      """
    Then the result contains:
      """
      {"entry": {"id": "e_003", "parent_id": "e_002", "message": {"content": [{"type": "text", "text": "three"}]}}}
      """
    And the call delivered no events
    And reading the active path of "s_001" gives "e_001, e_004"

  Scenario: unknown entries and unknown sessions read as null
    # Prevents: a stale client reference turning into an error the UI has to special-case.
    Given I append user messages "one" to "s_001"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_404"}
      """
    Then the result is null
    And the call delivered no events
    When I call "session::get-message" with:
      """
      {"session_id": "s_404", "entry_id": "e_001"}
      """
    Then the result is null
    And the call delivered no events
    And the file of session "s_404" does not exist

  Scenario: include_image_data false blanks only linked images of the entry
    # Prevents: refreshing one entry in a light view pulling megabytes of image data.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "timestamp": 1, "content": [
        {"type": "image", "mime": "image/png", "data": "aGVsbG8=", "attachment_id": "a_001"},
        {"type": "image", "mime": "image/png", "data": "aW5saW5l"}]}}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "include_image_data": false}
      """
    Then the result at "entry.message.content" is:
      """
      [{"type": "image", "mime": "image/png", "data": "", "attachment_id": "a_001"},
       {"type": "image", "mime": "image/png", "data": "aW5saW5l"}]
      """
    And the call delivered no events
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result at "entry.message.content.0.data" is:
      """
      "aGVsbG8="
      """
