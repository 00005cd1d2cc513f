@pure
Feature: session::set-meta replaces title, description and metadata
  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"title": "old", "description": "old d", "metadata": {"owner": "u_1", "tag": "keep"}}]]
      """
    And the clock advances by 250 ms

  Scenario: changing title and description bumps updated_at and announces the new meta
    # Prevents: set-meta not persisting, not bumping updated_at, or on-meta-updated missing fields.
    When I call "session::set-meta" with:
      """
      {"session_id": "s_001", "title": "new", "description": "new d"}
      """
    Then the result is:
      """
      {"meta": {"session_id": "s_001", "title": "new", "description": "new d", "status": "idle",
       "metadata": {"owner": "u_1", "tag": "keep"}, "created_at": 1000000, "updated_at": 1000250,
       "message_count": 0}}
      """
    And the call delivered exactly "session::on-meta-updated":
      """
      {"session_id": "s_001", "title": "new", "description": "new d",
       "metadata": {"owner": "u_1", "tag": "keep"}, "timestamp": 1000250,
       "session_metadata": {"owner": "u_1", "tag": "keep"}}
      """
    And the call delivered events "session::on-meta-updated"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"title": "new", "description": "new d", "updated_at": 1000250}}
      """

  Scenario: metadata is replaced wholesale and observers filter on the new metadata
    # Prevents: merging metadata (stale tenancy keys surviving) or events filtered by the old owner.
    Given an observer "new owner" watches "session::on-meta-updated" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_2"}}
      """
    And an observer "old owner" watches "session::on-meta-updated" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_1"}}
      """
    When I call "session::set-meta" with:
      """
      {"session_id": "s_001", "metadata": {"owner": "u_2"}}
      """
    Then the result contains:
      """
      {"meta": {"title": "old", "description": "old d", "metadata": {"owner": "u_2"}}}
      """
    And the call delivered exactly "session::on-meta-updated":
      """
      {"session_id": "s_001", "title": "old", "description": "old d", "metadata": {"owner": "u_2"},
       "timestamp": 1000250, "session_metadata": {"owner": "u_2"}}
      """
    And observer "new owner" received 1 events
    And observer "old owner" received 0 events
    And the call delivered events "session::on-meta-updated"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "meta.metadata" is:
      """
      {"owner": "u_2"}
      """

  Scenario: omitted fields are kept
    # Prevents: a title-only update wiping description or metadata.
    When I call "session::set-meta" with:
      """
      {"session_id": "s_001", "title": "only title"}
      """
    Then the result contains:
      """
      {"meta": {"title": "only title", "description": "old d", "metadata": {"owner": "u_1", "tag": "keep"}}}
      """
    And the call delivered "session::on-meta-updated" with:
      """
      {"title": "only title", "description": "old d"}
      """
    And the call delivered events "session::on-meta-updated"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"title": "only title", "description": "old d", "metadata": {"owner": "u_1", "tag": "keep"}}}
      """
    And the call delivered no events

  Scenario Outline: a request with no field to change is a silent no-op
    # Prevents: empty set-meta calls writing, bumping updated_at (re-ordering lists) or waking observers.
    Given the data dir is snapshotted
    When I call "session::set-meta" with:
      """
      <request>
      """
    Then the result is:
      """
      {"meta": {"session_id": "s_001", "title": "old", "description": "old d", "status": "idle",
       "metadata": {"owner": "u_1", "tag": "keep"}, "created_at": 1000000, "updated_at": 1000000,
       "message_count": 0}}
      """
    And the call delivered no events
    And the data dir is unchanged since the snapshot

    Examples:
      | request                                                                    |
      | {"session_id": "s_001"}                                                    |
      | {"session_id": "s_001", "title": null, "description": null, "metadata": null} |

  Scenario: a supplied value equal to the stored one still counts as a change
    # Prevents: an equality shortcut that drops the event observers rely on to resync.
    When I call "session::set-meta" with:
      """
      {"session_id": "s_001", "title": "old"}
      """
    Then the result at "meta.updated_at" is:
      """
      1000250
      """
    And the call delivered "session::on-meta-updated" with:
      """
      {"title": "old", "timestamp": 1000250}
      """
    And the call delivered events "session::on-meta-updated"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"title": "old", "description": "old d", "updated_at": 1000250}}
      """
    And the call delivered no events

  Scenario: set-meta leaves status, reason, transcript counters and draft alone
    # Prevents: set-meta rebuilding meta from defaults and dropping the draft or status_reason.
    Given these calls succeed:
      """
      [["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}}],
       ["session::set-status", {"session_id": "s_001", "status": "done", "reason": "answered"}],
       ["session::set-draft", {"session_id": "s_001", "draft": "follow-up"}]]
      """
    When I call "session::set-meta" with:
      """
      {"session_id": "s_001", "title": "renamed", "metadata": {"owner": "u_9"}}
      """
    Then the result contains:
      """
      {"meta": {"title": "renamed", "status": "done", "status_reason": "answered", "draft": "follow-up",
       "message_count": 1, "metadata": {"owner": "u_9"}}}
      """
    And the call delivered events "session::on-meta-updated"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"title": "renamed", "status_reason": "answered", "draft": "follow-up", "message_count": 1}}
      """

  Scenario: a session without metadata gets events without session_metadata
    # Prevents: events carrying "session_metadata": null (or {}) for sessions that have none.
    Given these calls succeed:
      """
      [["session::create", {"title": "bare"}]]
      """
    When I call "session::set-meta" with:
      """
      {"session_id": "s_002", "description": "still bare"}
      """
    Then the call delivered exactly "session::on-meta-updated":
      """
      {"session_id": "s_002", "title": "bare", "description": "still bare", "timestamp": 1000250}
      """
    And the result contains:
      """
      {"meta": {"metadata": "<absent>"}}
      """
    And the call delivered events "session::on-meta-updated"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_002"}
      """
    Then the result contains:
      """
      {"meta": {"title": "bare", "description": "still bare", "metadata": "<absent>", "updated_at": 1000250}}
      """
    And the call delivered no events

  Scenario: set-meta on an unknown session is not_found and creates nothing
    # Prevents: set-meta materialising a session (a file without a create) for an unknown id.
    When I call "session::set-meta" with:
      """
      {"session_id": "s_404", "title": "ghost"}
      """
    Then the call fails with "session/not_found"
    And the error message contains "session s_404 does not exist"
    And the call delivered no events
    And the data dir holds the files:
      """
      ["s_001.jsonl"]
      """

  Scenario: every mutation except set-draft moves updated_at, including set-active-leaf
    # Prevents: updated_desc lists missing activity (branch switches, streaming) or re-ordering on draft keystrokes.
    Given these calls succeed:
      """
      [["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 1}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "two"}], "timestamp": 2}}]]
      """
    And the clock is at 1001000
    When I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the call delivered no events
    And the result is:
      """
      {"active_leaf": "e_001"}
      """
    When the clock is at 1002000
    And I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "typing"}
      """
    Then the result is:
      """
      {"attachments": [], "draft": "typing"}
      """
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "meta.updated_at" is:
      """
      1001000
      """
    When the clock is at 1003000
    And I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "one!"}]}
      """
    Then the result is:
      """
      {"revision": 1, "updated": true}
      """
    And the call delivered events "session::on-message-updated"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "meta.updated_at" is:
      """
      1003000
      """
    When the clock is at 1004000
    And I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "working"}
      """
    Then the result is:
      """
      {"previous_status": "idle", "status": "working"}
      """
    And the call delivered events "session::on-status-changed"
    When the clock is at 1005000
    And I call "session::append-many" with:
      """
      {"session_id": "s_001",
       "messages": [{"role": "user", "content": [{"type": "text", "text": "three"}], "timestamp": 3}]}
      """
    Then the result is:
      """
      {"entry_ids": ["e_003"], "last_entry_id": "e_003"}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"updated_at": 1005000, "created_at": 1000000, "draft": "typing", "message_count": 3}}
      """
