@pure
Feature: session::delete removes a session with everything it holds
  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"title": "doomed", "metadata": {"owner": "u_1"}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 1}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "two"}], "timestamp": 2}}],
       ["session::create", {"title": "bystander"}]]
      """
    And the clock advances by 700 ms

  Scenario: deleting removes meta, entries and the file, for good
    # Prevents: half-deleted sessions (entries or file left behind) or deletions undone by a restart.
    When I call "session::delete" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"deleted": true}
      """
    And the call delivered exactly "session::on-deleted":
      """
      {"session_id": "s_001", "timestamp": 1000700, "session_metadata": {"owner": "u_1"}}
      """
    And the file of session "s_001" does not exist
    And the data dir holds the files:
      """
      ["s_002.jsonl"]
      """
    And the call delivered events "session::on-deleted"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is null
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result is null
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is null
    When I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_002"

  Scenario: deleting an unknown id reports false and announces nothing
    # Prevents: delete of an unknown id raising, or emitting a phantom on-deleted.
    Given the data dir is snapshotted
    When I call "session::delete" with:
      """
      {"session_id": "s_404"}
      """
    Then the result is:
      """
      {"deleted": false}
      """
    And the call delivered no events
    And the data dir is unchanged since the snapshot

  Scenario: a second delete reports false and the event fired only once
    # Prevents: retries of a delete emitting on-deleted again.
    Given these calls succeed:
      """
      [["session::delete", {"session_id": "s_001"}]]
      """
    When I call "session::delete" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"deleted": false}
      """
    And the call delivered no events
    And 1 "session::on-deleted" events were delivered in total
    And the data dir holds the files:
      """
      ["s_002.jsonl"]
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is null
    And the call delivered no events

  Scenario: observers see the tenancy the session had when it was deleted
    # Prevents: on-deleted without session_metadata, leaving tenant-filtered observers blind to deletions.
    Given an observer "u1" watches "session::on-deleted" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_1"}}
      """
    And an observer "u2" watches "session::on-deleted" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_2"}}
      """
    When I call "session::delete" with:
      """
      {"session_id": "s_001"}
      """
    Then observer "u1" received 1 events
    And observer "u1" event 1 contains:
      """
      {"session_id": "s_001", "session_metadata": {"owner": "u_1"}}
      """
    And observer "u2" received 0 events
    And the result is:
      """
      {"deleted": true}
      """
    And the call delivered events "session::on-deleted"
    When the store restarts
    And I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_002"
    And the call delivered no events

  Scenario: deleting a session without metadata emits no session_metadata
    # Prevents: "session_metadata": null on on-deleted.
    When I call "session::delete" with:
      """
      {"session_id": "s_002"}
      """
    Then the call delivered exactly "session::on-deleted":
      """
      {"session_id": "s_002", "timestamp": 1000700}
      """
    And the result is:
      """
      {"deleted": true}
      """
    And the call delivered events "session::on-deleted"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_002"}
      """
    Then the result is null
    When I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_001"
    And the call delivered no events

  Scenario: forks outlive the session they were forked from
    # Prevents: delete cascading into forks, or forks sharing storage with their source.
    Given these calls succeed:
      """
      [["session::fork", {"session_id": "s_001", "entry_id": "e_002"}]]
      """
    When I call "session::delete" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"deleted": true}
      """
    And the call delivered events "session::on-deleted"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_003"}
      """
    Then the result contains:
      """
      {"meta": {"forked_from": "s_001", "message_count": 2, "title": "doomed"}}
      """
    When I call "session::messages" with:
      """
      {"session_id": "s_003"}
      """
    Then the entry ids at "messages" are "e_003, e_004"

  Scenario: ensure after delete starts an empty session under the same id
    # Prevents: a recreated session resurrecting old entries, leaf, draft, status or counters.
    Given these calls succeed:
      """
      [["session::ensure", {"session_id": "chat-9", "metadata": {"owner": "u_1"}}],
       ["session::append", {"session_id": "chat-9",
         "message": {"role": "user", "content": [{"type": "text", "text": "old"}], "timestamp": 1}}],
       ["session::set-status", {"session_id": "chat-9", "status": "error", "reason": "old"}],
       ["session::set-draft", {"session_id": "chat-9", "draft": "old draft"}],
       ["session::delete", {"session_id": "chat-9"}]]
      """
    When I call "session::ensure" with:
      """
      {"session_id": "chat-9"}
      """
    Then the result is:
      """
      {"session_id": "chat-9", "created": true,
       "meta": {"session_id": "chat-9", "title": "", "description": "", "status": "idle",
                "created_at": 1000700, "updated_at": 1000700, "message_count": 0}}
      """
    And the call delivered events "session::on-created"
    When I call "session::messages" with:
      """
      {"session_id": "chat-9"}
      """
    Then the result is:
      """
      {"messages": []}
      """
    When I call "session::append" with:
      """
      {"session_id": "chat-9",
       "message": {"role": "user", "content": [{"type": "text", "text": "new"}], "timestamp": 2}}
      """
    Then the result contains:
      """
      {"parent_id": null}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "chat-9"}
      """
    Then the entry ids at "messages" are "e_004"
    And the file of session "chat-9" has 2 lines
