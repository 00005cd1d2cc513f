@pure
Feature: Streaming an assistant reply through the store
  An agent appends an empty assistant message and grows it with
  update-message; UIs render from events while streaming and from reads
  when they join late or after a restart.

  Background:
    Given a fresh session store

  Scenario: twenty guarded updates stream a reply that survives a restart
    # Prevents: lost or re-ordered stream revisions, and a late reader seeing a partial reply.
    Given an observer "ui" watches "session::on-message-updated" with filters:
      """
      {"input.message.role": {"$in": ["assistant"]}}
      """
    And I call "session::create" with:
      """
      {"title": "Weather question"}
      """
    And I append user messages "Will it rain?" to "s_001"
    And I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "working"}
      """
    And I append an empty assistant message to "s_001"
    When entry "e_002" of "s_001" is streamed in 20 updates of the text "It looks sunny all afternoon, no rain expected."
    Then observer "ui" received 20 events
    And observer "ui" received these "revision" values:
      """
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
      """
    And observer "ui" event 20 contains:
      """
      {"session_id": "s_001", "entry_id": "e_002",
       "message": {"role": "assistant", "content": [{"type": "text", "text": "It looks sunny all afternoon, no rain expected."}]}}
      """
    And 20 "session::on-message-updated" events were delivered in total
    And the call delivered events "session::on-message-updated"
    When I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "done"}
      """
    Then the call delivered exactly "session::on-status-changed":
      """
      {"session_id": "s_001", "status": "done", "previous_status": "working", "timestamp": 1000000}
      """
    And the result is:
      """
      {"previous_status": "working", "status": "done"}
      """
    And the call delivered events "session::on-status-changed"
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result is:
      """
      {"entry": {"kind": "message", "id": "e_002", "parent_id": "e_001", "timestamp": 1000000, "revision": 20,
                 "message": {"role": "assistant", "content": [{"type": "text", "text": "It looks sunny all afternoon, no rain expected."}],
                             "stop_reason": "end", "model": "m-1", "provider": "p-1", "timestamp": 42}}}
      """
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "done", "message_count": 2}}
      """

  Scenario: one observer of the whole turn sees each kind of event the right number of times
    # Prevents: a turn's events going missing, doubling, or leaking a user message into an assistant-only feed.
    Given an observer "turn" watches "session::on-created"
    And an observer "turn" watches "session::on-message-added"
    And an observer "turn" watches "session::on-message-updated" with filters:
      """
      {"input.message.role": {"$in": ["assistant"]}}
      """
    And an observer "turn" watches "session::on-status-changed"
    When these calls succeed:
      """
      [["session::create", {"title": "Weather question"}],
       ["session::append", {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "Rain?"}], "timestamp": 1}}],
       ["session::set-status", {"session_id": "s_001", "status": "working"}],
       ["session::append", {"session_id": "s_001", "message": {"role": "assistant", "content": [], "stop_reason": "end",
          "model": "m", "provider": "p", "timestamp": 2}}],
       ["session::update-message", {"session_id": "s_001", "entry_id": "e_002", "content": [{"type": "text", "text": "It"}]}],
       ["session::update-message", {"session_id": "s_001", "entry_id": "e_002", "content": [{"type": "text", "text": "It looks"}]}],
       ["session::update-message", {"session_id": "s_001", "entry_id": "e_002", "content": [{"type": "text", "text": "It looks sunny."}]}],
       ["session::set-status", {"session_id": "s_001", "status": "done"}]]
      """
    Then the call delivered events "session::on-created, session::on-message-added, session::on-status-changed, session::on-message-added, session::on-message-updated, session::on-message-updated, session::on-message-updated, session::on-status-changed"
    And observer "turn" received 8 events

    And observer "turn" event 1 contains:
      """
      {"session_id": "s_001", "title": "Weather question", "status": "idle"}
      """
    And observer "turn" event 2 contains:
      """
      {"entry_id": "e_001", "message": {"role": "user"}}
      """
    And observer "turn" event 3 contains:
      """
      {"status": "working", "previous_status": "idle"}
      """
    And observer "turn" event 4 contains:
      """
      {"entry_id": "e_002", "parent_id": "e_001", "message": {"role": "assistant", "content": []}}
      """
    And observer "turn" event 7 contains:
      """
      {"entry_id": "e_002", "revision": 3, "message": {"content": [{"type": "text", "text": "It looks sunny."}]}}
      """
    And observer "turn" event 8 contains:
      """
      {"status": "done", "previous_status": "working"}
      """
    And observer "turn" received these "session_id" values:
      """
      ["s_001", "s_001", "s_001", "s_001", "s_001", "s_001", "s_001", "s_001"]
      """
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001, e_002"
    And the result at "messages.1.message.content" is:
      """
      [{"type": "text", "text": "It looks sunny."}]
      """
    And the call delivered no events
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 3, "message": {"content": [{"type": "text", "text": "It looks sunny."}]}}}
      """
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "done", "message_count": 2}}
      """
    And observer "turn" received 8 events
