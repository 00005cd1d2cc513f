@pure
Feature: session::set-active-leaf switches branches
  The active leaf decides which path reads return and where the next
  append goes. Moving it writes no entry and fires no event; nothing is
  ever removed, so every branch stays readable and can be made active again.
  Our rule: moving the leaf does bump updated_at (it changes what the
  session shows), but never message_count.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "branches", "metadata": {"owner": "u_1"}}
      """
    And I append user messages "one, two, three" to "s_001"

  Scenario: moving the leaf back truncates the active path, silently
    # Prevents: a leaf switch that fires events, loses count, or does not survive a restart.
    Given the clock advances by 250 ms
    When I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result is:
      """
      {"active_leaf": "e_001"}
      """
    And the call delivered no events
    When the store restarts
    Then reading the active path of "s_001" gives "e_001"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 3, "updated_at": 1000250, "created_at": 1000000}}
      """

  Scenario: the next append after a switch grows a sibling branch
    # Prevents: an append after "edit" overwriting the old turn or attaching under the old leaf.
    Given I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    When I append user messages "two, again" to "s_001"
    Then the result is:
      """
      {"entry_id": "e_005", "parent_id": "e_004", "timestamp": 1000000}
      """
    And the call delivered events "session::on-message-added"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_004"}
      """
    Then the result contains:
      """
      {"entry": {"parent_id": "e_001"}}
      """
    And reading the active path of "s_001" gives "e_001, e_004, e_005"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result contains:
      """
      {"entry": {"parent_id": "e_001", "message": {"content": [{"type": "text", "text": "two"}]}}}
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 5}}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_004"}
      """
    Then the result contains:
      """
      {"entry": {"parent_id": "e_001"}}
      """
    Then reading the active path of "s_001" gives "e_001, e_004, e_005"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result contains:
      """
      {"entry": {"parent_id": "e_001", "message": {"content": [{"type": "text", "text": "two"}]}}}
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 5}}
      """

  Scenario: the abandoned branch stays readable and can be made active again
    # Prevents: branch history being pruned, or a switch back not restoring the old conversation.
    Given I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    And I append user messages "b" to "s_001"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_003"}
      """
    Then the entry ids at "messages" are "e_001, e_002, e_003"
    And the result at "messages.2.message.content" is:
      """
      [{"type": "text", "text": "three"}]
      """
    When I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_003"}
      """
    Then the result is:
      """
      {"active_leaf": "e_003"}
      """
    And the call delivered no events
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002, e_003"
    When I append user messages "four" to "s_001"
    Then the result contains:
      """
      {"entry_id": "e_005", "parent_id": "e_003"}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002, e_003, e_005"

  Scenario: a custom entry can be the active leaf
    # Prevents: branch switching refusing bookkeeping entries that sit at the tip of a path.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "parent_id": "e_002", "custom": {"custom_type": "checkpoint", "data": null}}
      """
    And I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_003"}
      """
    When I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_004"}
      """
    Then the result is:
      """
      {"active_leaf": "e_004"}
      """
    And the call delivered no events
    And reading the active path of "s_001" gives "e_001, e_002, e_004"
    When I append user messages "after checkpoint" to "s_001"
    Then the result contains:
      """
      {"entry_id": "e_005", "parent_id": "e_004"}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002, e_004, e_005"

  Scenario: unknown entries and sessions are refused and the leaf stays put
    # Prevents: a typo'd leaf id leaving the session pointing at nothing.
    Given the clock advances by 100 ms
    When I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_404"}
      """
    Then the call fails with "session/entry_not_found"
    And the error message contains "e_404"
    And the call delivered no events
    When I call "session::set-active-leaf" with:
      """
      {"session_id": "s_404", "entry_id": "e_001"}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002, e_003"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"updated_at": 1000000}}
      """
    And the file of session "s_404" does not exist
