@pure
Feature: Observers select session events with filters
  Every event carries what observers filter on: session_id, the message
  (role) on message events, and session_metadata (the tenancy hook) as the
  session has it at the moment of the mutation. An observer with no filter
  gets everything; a disposed observer gets nothing more.

  Background:
    Given a fresh session store

  Scenario: a session_id filter delivers only that session's appends
    # Prevents: a chat view receiving (and rendering) messages from other conversations.
    Given an observer "chat" watches "session::on-message-added" with filters:
      """
      {"input.session_id": {"$eq": "s_001"}}
      """
    When these calls succeed:
      """
      [["session::create", {}], ["session::create", {}]]
      """
    Then the call delivered events "session::on-created, session::on-created"
    When I append user messages "for one" to "s_001"
    Then the call delivered events "session::on-message-added"
    When I append user messages "for two" to "s_002"
    Then observer "chat" received 1 events
    And observer "chat" event 1 contains:
      """
      {"session_id": "s_001", "entry_id": "e_001", "message": {"content": [{"type": "text", "text": "for one"}]}}
      """
    And 2 "session::on-message-added" events were delivered in total
    And the call delivered events "session::on-message-added"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001"
    And reading the active path of "s_002" gives "e_002"

  Scenario: a role filter matches messages of that role and never custom entries
    # Prevents: an assistant-only feed waking up for user turns or for bookkeeping records.
    Given an observer "assistant" watches "session::on-message-added" with filters:
      """
      {"input.message.role": {"$in": ["assistant"]}}
      """
    And an observer "assistant-updates" watches "session::on-message-updated" with filters:
      """
      {"input.message.role": {"$in": ["assistant"]}}
      """
    When I call "session::create"
    Then the result is:
      """
      {"meta": {"created_at": 1000000, "description": "", "message_count": 0, "session_id": "s_001", "status": "idle", "title": "", "updated_at": 1000000}, "session_id": "s_001"}
      """
    And the call delivered events "session::on-created"
    When I append user messages "hi" to "s_001"
    Then the call delivered events "session::on-message-added"
    When I append an empty assistant message to "s_001"
    Then the call delivered events "session::on-message-added"
    When these calls succeed:
      """
      [["session::append", {"session_id": "s_001", "custom": {"custom_type": "compaction", "data": {}}}],
       ["session::update-message", {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "hi!"}]}],
       ["session::update-message", {"session_id": "s_001", "entry_id": "e_002", "content": [{"type": "text", "text": "hello"}]}]]
      """
    Then observer "assistant" received 1 events
    And observer "assistant" event 1 contains:
      """
      {"entry_id": "e_002", "parent_id": "e_001", "message": {"role": "assistant"}}
      """
    And observer "assistant-updates" received 1 events
    And observer "assistant-updates" event 1 contains:
      """
      {"entry_id": "e_002", "revision": 1, "message": {"content": [{"type": "text", "text": "hello"}]}}
      """
    And 3 "session::on-message-added" events were delivered in total
    And the call delivered events "session::on-message-added, session::on-message-updated, session::on-message-updated"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002, e_003"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 1, "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}}}
      """
    And the call delivered no events

  Scenario: the custom role is a message role; a custom entry is not
    # Prevents: custom-role messages and kind-custom bookkeeping entries being confused by role filters.
    Given an observer "notices" watches "session::on-message-added" with filters:
      """
      {"input.message.role": {"$in": ["custom"]}}
      """
    When I call "session::create"
    Then the result is:
      """
      {"meta": {"created_at": 1000000, "description": "", "message_count": 0, "session_id": "s_001", "status": "idle", "title": "", "updated_at": 1000000}, "session_id": "s_001"}
      """
    And the call delivered events "session::on-created"
    When these calls succeed:
      """
      [["session::append", {"session_id": "s_001", "message": {"role": "custom", "custom_type": "notice",
          "content": [{"type": "text", "text": "heads up"}], "timestamp": 1}}],
       ["session::append", {"session_id": "s_001", "custom": {"custom_type": "notice", "data": {"x": 1}}}]]
      """
    Then observer "notices" received 1 events
    And observer "notices" event 1 contains:
      """
      {"entry_id": "e_001", "message": {"role": "custom", "custom_type": "notice"}, "custom": "<absent>"}
      """
    And 2 "session::on-message-added" events were delivered in total
    And the call delivered events "session::on-message-added, session::on-message-added"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002"

  Scenario: a session_metadata filter keeps tenants apart
    # Prevents: one tenant's observer receiving another tenant's (or an unowned session's) messages.
    Given an observer "tenant-1" watches "session::on-message-added" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_1"}}
      """
    When these calls succeed:
      """
      [["session::create", {"metadata": {"owner": "u_1"}}],
       ["session::create", {"metadata": {"owner": "u_2"}}],
       ["session::create", {}]]
      """
    Then the call delivered events "session::on-created, session::on-created, session::on-created"
    When I append user messages "mine" to "s_001"
    Then the call delivered events "session::on-message-added"
    When I append user messages "theirs" to "s_002"
    Then the call delivered events "session::on-message-added"
    When I append user messages "nobody's" to "s_003"
    Then observer "tenant-1" received 1 events
    And observer "tenant-1" event 1 contains:
      """
      {"session_id": "s_001", "session_metadata": {"owner": "u_1"}}
      """
    And the call delivered events "session::on-message-added"
    When I call "session::get-message" with:
      """
      {"session_id": "s_003", "entry_id": "e_003"}
      """
    Then the result contains:
      """
      {"entry": {"id": "e_003"}}
      """
    And 3 "session::on-message-added" events were delivered in total
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_003", "entry_id": "e_003"}
      """
    Then the result contains:
      """
      {"entry": {"id": "e_003"}}
      """

  Scenario: filter clauses are ANDed
    # Prevents: a combined filter acting as OR and over-delivering.
    Given an observer "both" watches "session::on-message-added" with filters:
      """
      {"input.session_id": {"$eq": "s_001"}, "input.message.role": {"$in": ["assistant"]}}
      """
    When these calls succeed:
      """
      [["session::create", {}], ["session::create", {}]]
      """
    Then the call delivered events "session::on-created, session::on-created"
    When I append the assistant reply "wrong session" to "s_002"
    Then the call delivered events "session::on-message-added"
    When I append user messages "wrong role" to "s_001"
    Then observer "both" received 0 events
    And the call delivered events "session::on-message-added"
    When I append the assistant reply "right" to "s_001"
    Then observer "both" received 1 events
    And observer "both" event 1 contains:
      """
      {"session_id": "s_001", "entry_id": "e_003"}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    Then reading the active path of "s_001" gives "e_002, e_003"
    And reading the active path of "s_002" gives "e_001"

  Scenario: two matching observers each get the event
    # Prevents: deliveries being deduplicated across observers that both asked for the event.
    Given an observer "everything" watches "session::on-message-added"
    And an observer "just-one" watches "session::on-message-added" with filters:
      """
      {"input.session_id": {"$eq": "s_001"}}
      """
    When I call "session::create"
    Then the result is:
      """
      {"meta": {"created_at": 1000000, "description": "", "message_count": 0, "session_id": "s_001", "status": "idle", "title": "", "updated_at": 1000000}, "session_id": "s_001"}
      """
    And the call delivered events "session::on-created"
    When I append user messages "hello" to "s_001"
    Then observer "everything" received 1 events
    And observer "just-one" received 1 events
    And the call delivered events "session::on-message-added"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001"

  Scenario: a disposed observer receives nothing more
    # Prevents: a closed view's handler still being called (a leak, and errors on torn-down UI).
    Given an observer "view" watches "session::on-message-added"
    When I call "session::create"
    Then the result is:
      """
      {"meta": {"created_at": 1000000, "description": "", "message_count": 0, "session_id": "s_001", "status": "idle", "title": "", "updated_at": 1000000}, "session_id": "s_001"}
      """
    And the call delivered events "session::on-created"
    When I append user messages "seen" to "s_001"
    Then observer "view" received 1 events
    And the call delivered events "session::on-message-added"
    When observer "view" is disposed
    And I append user messages "unseen" to "s_001"
    Then observer "view" received 1 events
    And the call delivered events "session::on-message-added"
    And reading the active path of "s_001" gives "e_001, e_002"
    When the store restarts
    Then reading the active path of "s_001" gives "e_001, e_002"
    When I append user messages "after restart" to "s_001"
    Then observer "view" received 1 events
    And the call delivered events "session::on-message-added"

  Scenario: an observer without filters receives every event of its function
    # Prevents: sessions without metadata being invisible to unfiltered observers.
    Given an observer "all" watches "session::on-created"
    When these calls succeed:
      """
      [["session::create", {}], ["session::create", {"metadata": {"owner": "u_1"}}]]
      """
    Then observer "all" received 2 events
    And observer "all" event 1 contains:
      """
      {"session_id": "s_001", "session_metadata": "<absent>"}
      """
    And observer "all" event 2 contains:
      """
      {"session_id": "s_002", "session_metadata": {"owner": "u_1"}}
      """
    And the call delivered events "session::on-created, session::on-created"
    When the store restarts
    And I call "session::list" with:
      """
      {"order": "created_asc"}
      """
    Then the listed session ids are "s_001, s_002"
    And the result contains:
      """
      {"sessions": [{"metadata": "<absent>"}, {"metadata": {"owner": "u_1"}}]}
      """
    And the call delivered no events

  Scenario: meta-updated filters see the metadata after the update
    # Prevents: a session moved to a new owner announcing the move only to its old owner.
    Given an observer "old-owner" watches "session::on-meta-updated" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_1"}}
      """
    And an observer "new-owner" watches "session::on-meta-updated" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_2"}}
      """
    When I call "session::create" with:
      """
      {"metadata": {"owner": "u_1"}}
      """
    Then the result is:
      """
      {"meta": {"created_at": 1000000, "description": "", "message_count": 0, "metadata": {"owner": "u_1"}, "session_id": "s_001", "status": "idle", "title": "", "updated_at": 1000000}, "session_id": "s_001"}
      """
    And the call delivered events "session::on-created"
    When I call "session::set-meta" with:
      """
      {"session_id": "s_001", "metadata": {"owner": "u_2"}}
      """
    Then observer "old-owner" received 0 events
    And observer "new-owner" received 1 events
    And observer "new-owner" event 1 contains:
      """
      {"session_id": "s_001", "metadata": {"owner": "u_2"}, "session_metadata": {"owner": "u_2"}}
      """
    And the result is:
      """
      {"meta": {"created_at": 1000000, "description": "", "message_count": 0, "metadata": {"owner": "u_2"}, "session_id": "s_001", "status": "idle", "title": "", "updated_at": 1000000}}
      """
    And the call delivered events "session::on-meta-updated"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"metadata": {"owner": "u_2"}}}
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"metadata": {"owner": "u_2"}}}
      """

  Scenario: deleted filters see the metadata the session had when it was deleted
    # Prevents: a deletion going unannounced to its tenant because the metadata was already gone.
    Given an observer "tenant-1" watches "session::on-deleted" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_1"}}
      """
    And an observer "tenant-2" watches "session::on-deleted" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_2"}}
      """
    When I call "session::create" with:
      """
      {"metadata": {"owner": "u_1"}}
      """
    Then the result is:
      """
      {"meta": {"created_at": 1000000, "description": "", "message_count": 0, "metadata": {"owner": "u_1"}, "session_id": "s_001", "status": "idle", "title": "", "updated_at": 1000000}, "session_id": "s_001"}
      """
    And the call delivered events "session::on-created"
    When I call "session::delete" with:
      """
      {"session_id": "s_001"}
      """
    Then observer "tenant-1" received 1 events
    And observer "tenant-1" event 1 contains:
      """
      {"session_id": "s_001", "session_metadata": {"owner": "u_1"}}
      """
    And observer "tenant-2" received 0 events
    And the result is:
      """
      {"deleted": true}
      """
    And the call delivered events "session::on-deleted"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is null
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is null

  Scenario: a fork is announced to the tenant of its source
    # Prevents: forked sessions escaping tenancy-filtered dashboards.
    Given an observer "tenant-1" watches "session::on-created" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "u_1"}, "input.forked_from": {"$exists": true}}
      """
    When I call "session::create" with:
      """
      {"metadata": {"owner": "u_1"}}
      """
    Then the result is:
      """
      {"meta": {"created_at": 1000000, "description": "", "message_count": 0, "metadata": {"owner": "u_1"}, "session_id": "s_001", "status": "idle", "title": "", "updated_at": 1000000}, "session_id": "s_001"}
      """
    And the call delivered events "session::on-created"
    When I append user messages "root" to "s_001"
    Then the call delivered events "session::on-message-added"
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then observer "tenant-1" received 1 events
    And observer "tenant-1" event 1 contains:
      """
      {"session_id": "s_002", "forked_from": "s_001", "session_metadata": {"owner": "u_1"}}
      """
    And the result is:
      """
      {"meta": {"created_at": 1000000, "description": "", "forked_from": "s_001", "message_count": 1, "metadata": {"owner": "u_1"}, "session_id": "s_002", "status": "idle", "title": "", "updated_at": 1000000}, "session_id": "s_002"}
      """
    And the call delivered events "session::on-created"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_002"}
      """
    Then the result contains:
      """
      {"meta": {"forked_from": "s_001", "metadata": {"owner": "u_1"}, "message_count": 1}}
      """
    And the call delivered no events
    And reading the active path of "s_002" gives "e_002"
