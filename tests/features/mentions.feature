@pure
Feature: Session mentions (session::mention::search and session::mention::get)
  Sessions are mentioned in chat as @session(id="<session_id>"). The search
  feeds the console's @session: menu; the get turns one id into the pill,
  the preview card and the agent's summary. Both only read: no events.

  Background:
    Given a fresh session store
    And the mention sessions:
      | session_id | title              | description         | parent | kind | updated_at |
      | s_old      | fix login redirect |                     |        |      | 1000001    |
      | s_new      | login page polish  |                     |        |      | 1000002    |
      | s_desc     | database work      | about the login bug |        |      | 1000003    |
      | s_sub      | relogin helper     |                     |        |      | 1000004    |
      | s_child    | login sub-task     |                     | s_new  |      | 1000005    |
      | s_e2e      | login e2e run      |                     |        | e2e  | 1000009    |

  Scenario: title prefix, then title words, then title substring, then description
    # Prevents: ranking by recency alone, or a sub-agent outranking a chat of the same tier.
    When I call "session::mention::search" with:
      """
      {"query": "login"}
      """
    Then the result is:
      """
      {"items": [
        {"id": "s_new", "label": "login page polish", "description": "Idle · 0 messages", "color": "neutral"},
        {"id": "s_child", "label": "login sub-task", "hint": "sub-agent", "description": "Idle · 0 messages",
         "color": "neutral"},
        {"id": "s_old", "label": "fix login redirect", "description": "Idle · 0 messages", "color": "neutral"},
        {"id": "s_sub", "label": "relogin helper", "description": "Idle · 0 messages", "color": "neutral"},
        {"id": "s_desc", "label": "database work", "description": "Idle · 0 messages", "color": "neutral"}
      ]}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::mention::search" with:
      """
      {"query": "  LOGIN  "}
      """
    Then the mention ids are "s_new, s_child, s_old, s_sub, s_desc"
    And the call delivered no events

  Scenario Outline: ids and title words
    # Prevents: id prefixes matching from too few characters, or multi-word queries needing word order.
    When I call "session::mention::search" with:
      """
      {"query": "<query>"}
      """
    Then the mention ids are "<ids>"
    And the call delivered no events

    Examples:
      | query        | ids     |
      | s_old        | s_old   |
      | S_CH         | s_child |
      | s_c          |         |
      | redirect fix | s_old   |
      | pol log      | s_new   |
      | database wo  | s_desc  |
      | nothing here |         |

  Scenario: an empty query lists top-level chats, newest first, then sub-agents
    # Prevents: an empty menu before the user types, or e2e sessions in it.
    When I call "session::mention::search"
    Then the mention ids are "s_sub, s_desc, s_new, s_old, s_child"
    And the call delivered no events
    When I call "session::set-status" with:
      """
      {"session_id": "s_old", "status": "working"}
      """
    Then the result is:
      """
      {"previous_status": "idle", "status": "working"}
      """
    And the call delivered events "session::on-status-changed"
    When I call "session::mention::search" with:
      """
      {"query": ""}
      """
    Then the mention ids are "s_old, s_sub, s_desc, s_new, s_child"
    And the result at "items.0" is:
      """
      {"id": "s_old", "label": "fix login redirect", "description": "Working · 0 messages", "color": "blue"}
      """
    When the store restarts
    And I call "session::mention::search" with:
      """
      {"query": ""}
      """
    Then the mention ids are "s_old, s_sub, s_desc, s_new, s_child"
    And the result at "items.0" is:
      """
      {"id": "s_old", "label": "fix login redirect", "description": "Working · 0 messages", "color": "blue"}
      """

  Scenario: the asking session and e2e sessions never match
    # Prevents: offering a chat to mention itself, or test sessions in a user's menu.
    When I call "session::mention::search" with:
      """
      {"query": "login", "context": {"session_id": "s_new", "working_dir": "/tmp"}}
      """
    Then the mention ids are "s_child, s_old, s_sub, s_desc"
    And the call delivered no events
    When I call "session::mention::search" with:
      """
      {"query": "s_e2e"}
      """
    Then the mention ids are ""
    When I call "session::mention::search" with:
      """
      {"query": "", "context": null}
      """
    Then the result does not contain the text "s_e2e"
    When I call "session::get" with:
      """
      {"session_id": "s_e2e"}
      """
    Then the result contains:
      """
      {"meta": {"title": "login e2e run"}}
      """

  Scenario: the limit defaults to 8 and is clamped to 1..50
    # Prevents: unbounded menus, or a zero limit answering nothing.
    Given 60 plain sessions exist
    When I call "session::mention::search"
    Then the mention search returns 8 rows
    And the result at "items.0.id" is:
      """
      "s_060"
      """
    When I call "session::mention::search" with:
      """
      {"limit": 500}
      """
    Then the mention search returns 50 rows
    When I call "session::mention::search" with:
      """
      {"query": "plain", "limit": 0}
      """
    Then the mention ids are "s_060"
    And the call delivered no events

  Scenario: malformed search and get requests are rejected
    # Prevents: a traceback or a silent default for a wrong type.
    When I call "session::mention::search" with:
      """
      {"limit": -1}
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "limit"
    And the call delivered no events
    When I call "session::mention::search" with:
      """
      {"query": 5}
      """
    Then the call fails with "session/invalid_request"
    And the call delivered no events
    When I call "session::mention::get"
    Then the call fails with "session/invalid_request"
    And the error message contains "id"
    And the call delivered no events

  Scenario: get renders the pill, the preview card and the agent summary
    # Prevents: a card missing status, count, update time, parent or fork origin.
    Given these calls succeed:
      """
      [["session::append", {"session_id": "s_new", "message": {"role": "user",
         "content": [{"type": "text", "text": "hi"}], "timestamp": 1}}],
       ["session::append", {"session_id": "s_new", "message": {"role": "user",
         "content": [{"type": "text", "text": "again"}], "timestamp": 2}}]]
      """
    And the clock is at 1791244800000
    And I call "session::fork" with:
      """
      {"session_id": "s_new", "entry_id": "e_002", "title": "  "}
      """
    And I remember "session_id" as "fork"
    And these calls succeed:
      """
      [["session::set-meta", {"session_id": "${fork}",
         "metadata": {"parent_session_id": "s_new", "agent_profile": "coder"}}],
       ["session::set-status", {"session_id": "${fork}", "status": "error", "reason": "boom"}]]
      """
    When I call "session::mention::get" with:
      """
      {"id": "${fork}"}
      """
    Then the result is:
      """
      {"id": "s_001", "label": "Untitled session", "hint": "sub-agent", "description": "Error · 2 messages",
       "icon": "session", "color": "rose",
       "fields": [
         {"label": "Status", "value": "Error", "tone": "danger"},
         {"label": "Messages", "value": "2"},
         {"label": "Updated", "value": "2026-10-06T00:00:00.000Z"},
         {"label": "Reason", "value": "boom"},
         {"label": "Agent", "value": "coder"},
         {"label": "Parent", "value": "s_new"},
         {"label": "Forked from", "value": "s_new"}
       ],
       "open": {"session": "s_001"},
       "summary": "Chat session \"Untitled session\" (s_001) · status: error · 2 message(s) · updated 2026-10-06T00:00:00.000Z · agent: coder · sub-agent of s_new",
       "data": {"session_id": "s_001", "title": "  ", "description": "", "status": "error", "status_reason": "boom",
                "metadata": {"parent_session_id": "s_new", "agent_profile": "coder"}, "forked_from": "s_new",
                "created_at": 1791244800000, "updated_at": 1791244800000, "message_count": 2},
       "updated_at": "2026-10-06T00:00:00.000Z"}
      """
    And the call delivered no events
    When I call "session::mention::get" with:
      """
      {"id": "s_e2e"}
      """
    Then the result contains:
      """
      {"id": "s_e2e", "hint": "<absent>", "description": "Idle · 0 messages",
       "fields": [{"label": "Status", "value": "Idle", "tone": "neutral"}, {"label": "Messages", "value": "0"},
                  {"label": "Updated", "value": "1970-01-01T00:16:40.009Z"}, {"label": "Kind", "value": "e2e"}]}
      """

  Scenario: the parked draft never leaks into a mention
    # Prevents: a mention sharing the session owner's unsent input with another chat or an agent.
    Given I call "session::put-attachment" with:
      """
      {"session_id": "s_old", "name": "plan.txt", "mime": "text/plain", "data": "aGk="}
      """
    And I remember "attachment.attachment_id" as "att"
    And these calls succeed:
      """
      [["session::set-draft", {"session_id": "s_old", "draft": "unsent secret words", "attachment_ids": ["${att}"]}]]
      """
    When I call "session::mention::get" with:
      """
      {"id": "s_old"}
      """
    Then the result contains:
      """
      {"id": "s_old", "label": "fix login redirect",
       "data": {"session_id": "s_old", "draft": "<absent>", "draft_attachments": "<absent>"}}
      """
    And the result does not contain the text "unsent secret words"
    And the result does not contain the text "plan.txt"
    And the call delivered no events
    When I call "session::mention::search" with:
      """
      {"query": "fix"}
      """
    Then the mention ids are "s_old"
    And the result does not contain the text "unsent secret words"
    When the store restarts
    And I call "session::mention::get" with:
      """
      {"id": "s_old"}
      """
    Then the result does not contain the text "unsent secret words"
    When I call "session::get" with:
      """
      {"session_id": "s_old"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "unsent secret words"}}
      """

  Scenario: unknown and deleted ids answer null
    # Prevents: an error (or a stale card) for a token whose session is gone.
    When I call "session::mention::get" with:
      """
      {"id": "s_404"}
      """
    Then the result is null
    And the call delivered no events
    When I call "session::mention::get" with:
      """
      {"id": ""}
      """
    Then the result is null
    When I call "session::delete" with:
      """
      {"session_id": "s_desc"}
      """
    Then the result is:
      """
      {"deleted": true}
      """
    And the call delivered events "session::on-deleted"
    When the store restarts
    And I call "session::mention::get" with:
      """
      {"id": "s_desc"}
      """
    Then the result is null
    And the call delivered no events
    When I call "session::mention::search" with:
      """
      {"query": "database"}
      """
    Then the mention ids are ""

  Scenario: both functions are internal and trace-hidden; get declares the provider
    # Prevents: the console finding no @session provider, or agents calling the mention functions directly.
    Then the registration metadata of "session::mention::search" is:
      """
      {"internal": true, "trace_hidden": true}
      """
    And the registration metadata of "session::mention::get" is:
      """
      {"internal": true, "trace_hidden": true,
       "mention": {"v": 1, "name": "session", "label": "Sessions",
                   "description": "A chat session, by session id; its transcript reads through session::messages-tail",
                   "icon": "session", "color": "neutral", "search": "session::mention::search",
                   "details": {"function_id": "session::get", "id_field": "session_id"}}}
      """

  Scenario: every token grammar case of the project fixture
    # Prevents: our parser or writer drifting from the console's and the Rust reference's.
    When every case of the mention token fixture is run
    Then no grammar case fails
