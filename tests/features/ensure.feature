@pure
Feature: session::ensure creates a session under a caller-chosen id, or returns the existing one
  Background:
    Given a fresh session store

  Scenario: a missing id is created fresh and announced
    # Prevents: ensure producing a different shape than create, or consuming a generated session id.
    When I call "session::ensure" with:
      """
      {"session_id": "chat-42", "title": "TG chat", "metadata": {"telegram_chat_id": 42}}
      """
    Then the result is:
      """
      {"session_id": "chat-42", "created": true,
       "meta": {"session_id": "chat-42", "title": "TG chat", "description": "", "status": "idle",
                "metadata": {"telegram_chat_id": 42}, "created_at": 1000000, "updated_at": 1000000,
                "message_count": 0}}
      """
    And the call delivered exactly "session::on-created":
      """
      {"session_id": "chat-42", "title": "TG chat", "description": "", "status": "idle",
       "created_at": 1000000, "session_metadata": {"telegram_chat_id": 42}}
      """
    And the call delivered events "session::on-created"
    When I call "session::create" with:
      """
      {}
      """
    Then the result at "session_id" is:
      """
      "s_001"
      """
    And the data dir holds the files:
      """
      ["chat-42.jsonl", "s_001.jsonl"]
      """
    And the call delivered events "session::on-created"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "chat-42"}
      """
    Then the result is:
      """
      {"meta": {"session_id": "chat-42", "title": "TG chat", "description": "", "status": "idle",
                "metadata": {"telegram_chat_id": 42}, "created_at": 1000000, "updated_at": 1000000,
                "message_count": 0}}
      """
    And the call delivered no events

  Scenario: ensuring an existing id is a pure read
    # Prevents: ensure overwriting title/metadata, bumping updated_at, writing, or re-announcing an existing session.
    Given I call "session::ensure" with:
      """
      {"session_id": "chat-42", "title": "original", "metadata": {"owner": "u_1"}}
      """
    And the clock advances by 300 ms
    And the data dir is snapshotted
    When I call "session::ensure" with:
      """
      {"session_id": "chat-42", "title": "changed", "description": "new", "metadata": {"owner": "u_2"}}
      """
    Then the result is:
      """
      {"session_id": "chat-42", "created": false,
       "meta": {"session_id": "chat-42", "title": "original", "description": "", "status": "idle",
                "metadata": {"owner": "u_1"}, "created_at": 1000000, "updated_at": 1000000,
                "message_count": 0}}
      """
    And the call delivered no events
    And 1 "session::on-created" events were delivered in total
    And the data dir is unchanged since the snapshot
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "chat-42"}
      """
    Then the result contains:
      """
      {"meta": {"title": "original", "metadata": {"owner": "u_1"}, "updated_at": 1000000}}
      """

  Scenario: ensure never touches the state of an existing session
    # Prevents: ensure resetting status, transcript or draft of a live session.
    Given these calls succeed:
      """
      [["session::ensure", {"session_id": "chat-7"}],
       ["session::append", {"session_id": "chat-7",
         "message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}}],
       ["session::set-status", {"session_id": "chat-7", "status": "working", "reason": "thinking"}],
       ["session::set-draft", {"session_id": "chat-7", "draft": "half"}]]
      """
    When I call "session::ensure" with:
      """
      {"session_id": "chat-7", "title": "again"}
      """
    Then the result contains:
      """
      {"created": false, "meta": {"title": "", "status": "working", "status_reason": "thinking",
       "draft": "half", "message_count": 1}}
      """
    And the call delivered no events
    When I call "session::messages" with:
      """
      {"session_id": "chat-7"}
      """
    Then the entry ids at "messages" are "e_001"
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "chat-7"}
      """
    Then the entry ids at "messages" are "e_001"

  Scenario: an empty session id is rejected before anything happens
    # Prevents: a session stored under "" (a file named ".jsonl") or an on-created for it.
    When I call "session::ensure" with:
      """
      {"session_id": "", "title": "nameless"}
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "session_id"
    And the call delivered no events
    And the data dir holds the files:
      """
      []
      """
    When I call "session::list" with:
      """
      {}
      """
    Then the listed sessions are none

  Scenario: a whitespace id is a real id, taken as-is
    # Prevents: ids being trimmed (two callers' ids colliding) or whitespace ids rejected like empty ones.
    When I call "session::ensure" with:
      """
      {"session_id": " "}
      """
    Then the result contains:
      """
      {"session_id": " ", "created": true, "meta": {"session_id": " "}}
      """
    And the call delivered "session::on-created" with:
      """
      {"session_id": " "}
      """
    And the data dir holds the files:
      """
      ["%20.jsonl"]
      """
    And the call delivered events "session::on-created"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": " "}
      """
    Then the result at "meta.session_id" is:
      """
      " "
      """
