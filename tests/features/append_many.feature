@pure
Feature: session::append-many writes a batch of messages as one chain
  A batch becomes consecutive entries, each the child of the one before, in
  request order; the first hangs off the active leaf or the explicit parent.
  Every entry is announced with its own on-message-added, in order.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "batch", "metadata": {"owner": "u_1"}}
      """

  Scenario: a batch on an empty session is chained in order and announced entry by entry
    # Prevents: batch entries stored out of order, left as siblings, or announced as a single event.
    Given the clock advances by 50 ms
    When I call "session::append-many" with:
      """
      {"session_id": "s_001", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 1},
        {"role": "user", "content": [{"type": "text", "text": "two"}], "timestamp": 2},
        {"role": "user", "content": [{"type": "text", "text": "three"}], "timestamp": 3}]}
      """
    Then the result is:
      """
      {"entry_ids": ["e_001", "e_002", "e_003"], "last_entry_id": "e_003"}
      """
    And the call delivered events "session::on-message-added, session::on-message-added, session::on-message-added"
    And event 1 of the call is "session::on-message-added" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "parent_id": null, "timestamp": 1000050,
       "message": {"content": [{"type": "text", "text": "one"}]}, "session_metadata": {"owner": "u_1"}}
      """
    And event 2 of the call is "session::on-message-added" with:
      """
      {"entry_id": "e_002", "parent_id": "e_001", "timestamp": 1000050, "message": {"content": [{"type": "text", "text": "two"}]}}
      """
    And event 3 of the call is "session::on-message-added" with:
      """
      {"entry_id": "e_003", "parent_id": "e_002", "timestamp": 1000050, "message": {"content": [{"type": "text", "text": "three"}]}}
      """
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002, e_003"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 3, "updated_at": 1000050}}
      """
    When I append user messages "four" to "s_001"
    Then the call delivered events "session::on-message-added"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_004"}
      """
    Then the result contains:
      """
      {"entry": {"parent_id": "e_003"}}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_004"}
      """
    Then the result contains:
      """
      {"entry": {"parent_id": "e_003"}}
      """

  Scenario: without parent_id a batch continues from the active leaf
    # Prevents: a batch that starts a new root instead of continuing the conversation.
    Given I append user messages "before" to "s_001"
    When I call "session::append-many" with:
      """
      {"session_id": "s_001", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}], "timestamp": 1},
        {"role": "user", "content": [{"type": "text", "text": "b"}], "timestamp": 2}]}
      """
    Then the result is:
      """
      {"entry_ids": ["e_002", "e_003"], "last_entry_id": "e_003"}
      """
    And event 1 of the call is "session::on-message-added" with:
      """
      {"entry_id": "e_002", "parent_id": "e_001"}
      """
    And event 2 of the call is "session::on-message-added" with:
      """
      {"entry_id": "e_003", "parent_id": "e_002"}
      """
    And the call delivered events "session::on-message-added, session::on-message-added"
    And reading the active path of "s_001" gives "e_001, e_002, e_003"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002, e_003"

  Scenario: an explicit parent puts the batch on a new branch and makes it active
    # Prevents: a regenerated tail that is written but left off the active path.
    Given I append user messages "one, two" to "s_001"
    When I call "session::append-many" with:
      """
      {"session_id": "s_001", "parent_id": "e_001", "origin": {"turn_id": "t_2"}, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "two again"}], "timestamp": 1},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "stop_reason": "end", "model": "m-1", "provider": "p-1", "timestamp": 2}]}
      """
    Then the result is:
      """
      {"entry_ids": ["e_003", "e_004"], "last_entry_id": "e_004"}
      """
    And event 1 of the call is "session::on-message-added" with:
      """
      {"entry_id": "e_003", "parent_id": "e_001", "origin": {"turn_id": "t_2"}}
      """
    And event 2 of the call is "session::on-message-added" with:
      """
      {"entry_id": "e_004", "parent_id": "e_003", "origin": {"turn_id": "t_2"}}
      """
    And the call delivered events "session::on-message-added, session::on-message-added"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_003, e_004"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result contains:
      """
      {"entry": {"parent_id": "e_001", "message": {"content": [{"type": "text", "text": "two"}]}}}
      """

  Scenario: an unknown parent refuses the whole batch
    # Prevents: half a batch written before the parent check, or an orphaned chain.
    Given I append user messages "one" to "s_001"
    When I call "session::append-many" with:
      """
      {"session_id": "s_001", "parent_id": "e_404", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "lost"}], "timestamp": 1}]}
      """
    Then the call fails with "session/parent_not_found"
    And the call delivered no events
    When the store restarts
    Then reading the active path of "s_001" gives "e_001"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 1}}
      """

  Scenario: an empty batch is refused, but a missing session is reported first
    # Prevents: a no-op write bumping updated_at, or empty_batch hiding that the session is gone.
    When I call "session::append-many" with:
      """
      {"session_id": "s_001", "messages": []}
      """
    Then the call fails with "session/empty_batch"
    And the call delivered no events
    When I call "session::append-many" with:
      """
      {"session_id": "s_404", "messages": []}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 0, "updated_at": 1000000}}
      """

  Scenario: the same batch sent twice is stored twice
    # Prevents: someone "deduplicating" batches by content, which would silently drop repeated turns.
    Given these calls succeed:
      """
      [["session::append-many", {"session_id": "s_001", "messages": [
         {"role": "user", "content": [{"type": "text", "text": "same"}], "timestamp": 1}]}]]
      """
    When I call "session::append-many" with:
      """
      {"session_id": "s_001", "messages": [{"role": "user", "content": [{"type": "text", "text": "same"}], "timestamp": 1}]}
      """
    Then the result is:
      """
      {"entry_ids": ["e_002"], "last_entry_id": "e_002"}
      """
    And the call delivered events "session::on-message-added"
    And reading the active path of "s_001" gives "e_001, e_002"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 2}}
      """
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 2}}
      """

  Scenario: a batch with one malformed message is refused as a whole
    # Prevents: the valid part of a batch being written when one message fails validation.
    When I call "session::append-many" with:
      """
      {"session_id": "s_001", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "fine"}], "timestamp": 1},
        {"role": "robot", "content": [], "timestamp": 2}]}
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "messages"
    And the call delivered no events
    And reading the active path of "s_001" gives ""
