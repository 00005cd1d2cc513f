@pure
Feature: session::create starts a new, idle session under a generated id
  Background:
    Given a fresh session store

  Scenario: a bare create yields an idle session with defaults and no optional keys
    # Prevents: optional meta keys (metadata, draft, status_reason, forked_from) leaking as null/empty on a new session.
    When I call "session::create" with:
      """
      {}
      """
    Then the result is:
      """
      {"session_id": "s_001", "meta": {"session_id": "s_001", "title": "", "description": "",
       "status": "idle", "created_at": 1000000, "updated_at": 1000000, "message_count": 0}}
      """
    And the call delivered exactly "session::on-created":
      """
      {"session_id": "s_001", "title": "", "description": "", "status": "idle", "created_at": 1000000}
      """
    And the data dir holds the files:
      """
      ["s_001.jsonl"]
      """
    And the call delivered events "session::on-created"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"meta": {"session_id": "s_001", "title": "", "description": "", "status": "idle",
       "created_at": 1000000, "updated_at": 1000000, "message_count": 0}}
      """
    And the call delivered no events

  Scenario: title, description and metadata are stored, echoed and carried by the event
    # Prevents: a created session losing its fields, or on-created missing session_metadata for tenancy filters.
    Given the clock is at 1000500
    When I call "session::create" with:
      """
      {"title": "hello", "description": "first chat", "metadata": {"owner": "u_1", "channel": "web"}}
      """
    Then the result is:
      """
      {"session_id": "s_001", "meta": {"session_id": "s_001", "title": "hello", "description": "first chat",
       "status": "idle", "metadata": {"owner": "u_1", "channel": "web"}, "created_at": 1000500,
       "updated_at": 1000500, "message_count": 0}}
      """
    And the call delivered exactly "session::on-created":
      """
      {"session_id": "s_001", "title": "hello", "description": "first chat", "status": "idle",
       "created_at": 1000500, "session_metadata": {"owner": "u_1", "channel": "web"}}
      """
    And the call delivered events "session::on-created"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"meta": {"session_id": "s_001", "title": "hello", "description": "first chat", "status": "idle",
       "metadata": {"owner": "u_1", "channel": "web"}, "created_at": 1000500, "updated_at": 1000500,
       "message_count": 0}}
      """
    And the call delivered no events

  Scenario: null fields mean the defaults
    # Prevents: an explicit null being stored as a null title or a null metadata key.
    When I call "session::create" with:
      """
      {"title": null, "description": null, "metadata": null}
      """
    Then the result is:
      """
      {"session_id": "s_001", "meta": {"session_id": "s_001", "title": "", "description": "",
       "status": "idle", "created_at": 1000000, "updated_at": 1000000, "message_count": 0}}
      """
    And the call delivered exactly "session::on-created":
      """
      {"session_id": "s_001", "title": "", "description": "", "status": "idle", "created_at": 1000000}
      """
    And the call delivered events "session::on-created"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"metadata": "<absent>", "title": ""}}
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"metadata": "<absent>", "title": ""}}
      """

  Scenario: an explicit empty metadata object is kept as an empty object
    # Prevents: {} metadata collapsing to "no metadata" (it is a value the caller chose).
    When I call "session::create" with:
      """
      {"metadata": {}}
      """
    Then the result contains:
      """
      {"meta": {"metadata": {}}}
      """
    And the call delivered "session::on-created" with:
      """
      {"session_id": "s_001", "session_metadata": {}}
      """
    And the call delivered events "session::on-created"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"metadata": {}}}
      """

  Scenario: each create gets the next generated id and its own event
    # Prevents: id reuse between creates, or one create overwriting another's file.
    When I call "session::create" with:
      """
      {"title": "a"}
      """
    Then the result at "session_id" is:
      """
      "s_001"
      """
    And the call delivered events "session::on-created"
    When I call "session::create" with:
      """
      {"title": "b"}
      """
    Then the result at "session_id" is:
      """
      "s_002"
      """
    And the call delivered "session::on-created" with:
      """
      {"session_id": "s_002", "title": "b", "session_metadata": "<absent>"}
      """
    And 2 "session::on-created" events were delivered in total
    And the data dir holds the files:
      """
      ["s_001.jsonl", "s_002.jsonl"]
      """
    And the call delivered events "session::on-created"
    When the store restarts
    And I call "session::list" with:
      """
      {"order": "created_asc"}
      """
    Then the listed session ids are "s_001, s_002"
    And the result contains:
      """
      {"sessions": [{"title": "a"}, {"title": "b"}], "next_cursor": "<absent>"}
      """

  Scenario: an observer filtered on session_metadata.owner sees only its tenant's creates
    # Prevents: on-created without session_metadata, which would break tenancy filtering.
    Given an observer "tenant" watches "session::on-created" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_1"}}
      """
    When these calls succeed:
      """
      [["session::create", {"title": "mine", "metadata": {"owner": "u_1"}}],
       ["session::create", {"title": "theirs", "metadata": {"owner": "u_2"}}],
       ["session::create", {"title": "nobody's"}]]
      """
    Then observer "tenant" received 1 events
    And observer "tenant" event 1 contains:
      """
      {"session_id": "s_001", "title": "mine", "session_metadata": {"owner": "u_1"}}
      """
    And 3 "session::on-created" events were delivered in total
    And the call delivered events "session::on-created, session::on-created, session::on-created"
    When the store restarts
    And I call "session::list" with:
      """
      {"order": "created_asc"}
      """
    Then the listed session ids are "s_001, s_002, s_003"
    And the result contains:
      """
      {"sessions": [{"metadata": {"owner": "u_1"}}, {"metadata": {"owner": "u_2"}}, {"metadata": "<absent>"}]}
      """
    And the call delivered no events
