@pure
Feature: session::fork copies a root-to-entry path into a new session
  The copy gets a new session id and fresh entry ids (session id first,
  then the entries in path order), keeps each entry's timestamp, origin and
  body, restarts revisions at 0 and leaves the source untouched. The two
  sessions are independent from then on.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "main", "description": "the main line", "metadata": {"owner": "u_1"}}
      """
    And I append user messages "one" to "s_001"
    And I append an empty assistant message to "s_001"
    And I append user messages "three" to "s_001"

  Scenario: a fork copies the path with fresh ids and announces only the new session
    # Prevents: a fork that shares entry ids with its source, counts the wrong path, or fires events for the source.
    Given the clock advances by 1000 ms
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_002", "title": "alt take"}
      """
    Then the result is:
      """
      {"session_id": "s_002", "meta": {"session_id": "s_002", "title": "alt take", "description": "the main line",
        "status": "idle", "metadata": {"owner": "u_1"}, "forked_from": "s_001",
        "created_at": 1001000, "updated_at": 1001000, "message_count": 2}}
      """
    And the call delivered events "session::on-created"
    And the call delivered exactly "session::on-created":
      """
      {"session_id": "s_002", "title": "alt take", "description": "the main line", "status": "idle",
       "forked_from": "s_001", "created_at": 1001000, "session_metadata": {"owner": "u_1"}}
      """
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_002"}
      """
    Then the result is:
      """
      {"messages": [
        {"entry_id": "e_004", "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 42}},
        {"entry_id": "e_005", "message": {"role": "assistant", "content": [], "stop_reason": "end", "model": "m-1", "provider": "p-1", "timestamp": 42}}]}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_002", "entry_id": "e_005"}
      """
    Then the result contains:
      """
      {"entry": {"parent_id": "e_004", "timestamp": 1000000, "revision": 0}}
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"updated_at": 1000000, "message_count": 3, "forked_from": "<absent>"}}
      """
    And reading the active path of "s_001" gives "e_001, e_002, e_003"

  Scenario: the fork's active leaf is the copy of the fork point
    # Prevents: the first message in a fork landing at the root or after the source's newer entries.
    Given I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    When I append user messages "fork continues" to "s_002"
    Then the result contains:
      """
      {"entry_id": "e_006", "parent_id": "e_005"}
      """
    And the call delivered "session::on-message-added" with:
      """
      {"session_id": "s_002", "entry_id": "e_006", "parent_id": "e_005", "session_metadata": {"owner": "u_1"}}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    Then reading the active path of "s_002" gives "e_004, e_005, e_006"

  Scenario: without a title the fork takes the source's title
    # Prevents: forks appearing as untitled sessions in the list.
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_003"}
      """
    Then the result contains:
      """
      {"session_id": "s_002", "meta": {"title": "main", "description": "the main line", "message_count": 3}}
      """
    And the call delivered "session::on-created" with:
      """
      {"title": "main", "forked_from": "s_001"}
      """
    And the call delivered events "session::on-created"
    When I call "session::get" with:
      """
      {"session_id": "s_002"}
      """
    Then the result contains:
      """
      {"meta": {"title": "main", "forked_from": "s_001"}}
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_002"}
      """
    Then the result contains:
      """
      {"meta": {"title": "main", "forked_from": "s_001"}}
      """

  Scenario: source and fork evolve independently
    # Prevents: shared entry or metadata objects letting an edit in one session show up in the other.
    Given I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    When these calls succeed:
      """
      [["session::append", {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "source only"}], "timestamp": 1}}],
       ["session::update-message", {"session_id": "s_002", "entry_id": "e_004", "content": [{"type": "text", "text": "uno"}]}],
       ["session::update-message", {"session_id": "s_001", "entry_id": "e_002", "content": [{"type": "text", "text": "source reply"}]}],
       ["session::set-meta", {"session_id": "s_002", "metadata": {"owner": "u_2"}}]]
      """
    Then the call delivered events "session::on-message-added, session::on-message-updated, session::on-message-updated, session::on-meta-updated"
    When the store restarts

    And I call "session::messages" with:
      """
      {"session_id": "s_002"}
      """
    Then the entry ids at "messages" are "e_004, e_005"
    And the result contains:
      """
      {"messages": [{"message": {"content": [{"type": "text", "text": "uno"}]}}, {"message": {"content": []}}]}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 0, "message": {"content": [{"type": "text", "text": "one"}]}}}
      """
    And reading the active path of "s_001" gives "e_001, e_002, e_003, e_006"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"metadata": {"owner": "u_1"}, "message_count": 4}}
      """
    When I call "session::get" with:
      """
      {"session_id": "s_002"}
      """
    Then the result contains:
      """
      {"meta": {"metadata": {"owner": "u_2"}, "message_count": 2}}
      """

  Scenario: deleting the source leaves the fork intact
    # Prevents: forks sharing storage with their source and dying with it.
    Given I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_003"}
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
      {"session_id": "s_002"}
      """
    Then the result contains:
      """
      {"meta": {"forked_from": "s_001", "message_count": 3}}
      """
    And reading the active path of "s_002" gives "e_004, e_005, e_006"
    And the file of session "s_001" does not exist

  Scenario: only the root-to-entry path is copied, even from a branch that is not active
    # Prevents: sibling branches leaking into the fork, or forks refused off the active path.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "parent_id": "e_001", "message": {"role": "user", "content": [{"type": "text", "text": "branch-b"}], "timestamp": 42}}
      """
    And I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_003"}
      """
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_004"}
      """
    Then the result contains:
      """
      {"session_id": "s_002", "meta": {"message_count": 2}}
      """
    And the call delivered events "session::on-created"
    When I call "session::messages" with:
      """
      {"session_id": "s_002"}
      """
    Then the entry ids at "messages" are "e_005, e_006"
    And the result contains:
      """
      {"messages": [{"message": {"content": [{"type": "text", "text": "one"}]}},
                    {"message": {"content": [{"type": "text", "text": "branch-b"}]}}]}
      """
    And reading the active path of "s_001" gives "e_001, e_002, e_003"
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_002"}
      """
    Then the entry ids at "messages" are "e_005, e_006"
    And the result contains:
      """
      {"messages": [{"message": {"content": [{"type": "text", "text": "one"}]}},
                    {"message": {"content": [{"type": "text", "text": "branch-b"}]}}]}
      """
    Then reading the active path of "s_001" gives "e_001, e_002, e_003"

  Scenario: copies start at revision 0 with the source's latest content
    # Prevents: a fork inheriting revision numbers that make its first guarded update look stale.
    Given I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002", "content": [{"type": "text", "text": "rev1"}]}
      """
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result is:
      """
      {"meta": {"created_at": 1000000, "description": "the main line", "forked_from": "s_001", "message_count": 2, "metadata": {"owner": "u_1"}, "session_id": "s_002", "status": "idle", "title": "main", "updated_at": 1000000}, "session_id": "s_002"}
      """
    And the call delivered events "session::on-created"
    When I call "session::get-message" with:
      """
      {"session_id": "s_002", "entry_id": "e_005"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 0, "message": {"content": [{"type": "text", "text": "rev1"}]}}}
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_002", "entry_id": "e_005", "expected_revision": 0, "content": [{"type": "text", "text": "rev1 in fork"}]}
      """
    Then the result is:
      """
      {"updated": true, "revision": 1}
      """
    And the call delivered events "session::on-message-updated"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 1, "message": {"content": [{"type": "text", "text": "rev1"}]}}}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 1, "message": {"content": [{"type": "text", "text": "rev1"}]}}}
      """

  Scenario: timestamps, origins and custom entries are copied; status, reason and draft are not
    # Prevents: history re-dated to the fork time, provenance lost, or a fork inheriting the source's live state.
    Given the clock advances by 100 ms
    And I call "session::append" with:
      """
      {"session_id": "s_001", "origin": {"by": "compactor"}, "custom": {"custom_type": "marker", "data": {"n": 1}}}
      """
    And these calls succeed:
      """
      [["session::set-status", {"session_id": "s_001", "status": "working", "reason": "busy"}],
       ["session::set-draft", {"session_id": "s_001", "draft": "unsent words"}]]
      """
    And the clock advances by 1000 ms
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_004"}
      """
    Then the result is:
      """
      {"session_id": "s_002", "meta": {"session_id": "s_002", "title": "main", "description": "the main line",
        "status": "idle", "metadata": {"owner": "u_1"}, "forked_from": "s_001",
        "created_at": 1001100, "updated_at": 1001100, "message_count": 3}}
      """
    And the call delivered events "session::on-created"
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_002", "entry_id": "e_008"}
      """
    Then the result is:
      """
      {"entry": {"kind": "custom", "id": "e_008", "parent_id": "e_007", "timestamp": 1000100, "revision": 0,
                 "origin": {"by": "compactor"}, "custom_type": "marker", "data": {"n": 1}}}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_002", "entry_id": "e_005"}
      """
    Then the result contains:
      """
      {"entry": {"timestamp": 1000000}}
      """
    And reading the active path of "s_002" gives "e_005, e_006, e_007, e_008"
    When I call "session::get" with:
      """
      {"session_id": "s_002"}
      """
    Then the result contains:
      """
      {"meta": {"status": "idle", "status_reason": "<absent>", "draft": "<absent>"}}
      """

  Scenario: a copied compaction record points at the copy of its tail start
    # Prevents: a forked compaction summary naming an entry id that only exists in the source.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "custom": {"custom_type": "compaction", "data": {"summary": "s", "tail_start_entry_id": "e_002"}}}
      """
    And I call "session::append" with:
      """
      {"session_id": "s_001", "custom": {"custom_type": "compaction", "data": {"summary": "t", "tail_start_entry_id": "e_999"}}}
      """
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_005"}
      """
    Then the result is:
      """
      {"meta": {"created_at": 1000000, "description": "the main line", "forked_from": "s_001", "message_count": 3, "metadata": {"owner": "u_1"}, "session_id": "s_002", "status": "idle", "title": "main", "updated_at": 1000000}, "session_id": "s_002"}
      """
    And the call delivered events "session::on-created"
    When I call "session::messages" with:
      """
      {"session_id": "s_002", "include_custom": true}
      """
    Then the entry ids at "messages" are "e_006, e_007, e_008, e_009, e_010"
    And the result at "messages.3.custom.data" is:
      """
      {"summary": "s", "tail_start_entry_id": "e_007"}
      """
    And the result at "messages.4.custom.data" is:
      """
      {"summary": "t", "tail_start_entry_id": "e_999"}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_004"}
      """
    Then the result at "entry.data.tail_start_entry_id" is:
      """
      "e_002"
      """
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_002", "include_custom": true}
      """
    Then the entry ids at "messages" are "e_006, e_007, e_008, e_009, e_010"
    And the result at "messages.3.custom.data" is:
      """
      {"summary": "s", "tail_start_entry_id": "e_007"}
      """
    And the result at "messages.4.custom.data" is:
      """
      {"summary": "t", "tail_start_entry_id": "e_999"}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_004"}
      """
    Then the result at "entry.data.tail_start_entry_id" is:
      """
      "e_002"
      """

  Scenario: forking from an unknown entry or session creates nothing
    # Prevents: a failed fork leaving an empty session behind or burning a session id.
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_404"}
      """
    Then the call fails with "session/entry_not_found"
    And the call delivered no events
    When I call "session::fork" with:
      """
      {"session_id": "s_404", "entry_id": "e_001"}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events
    When I call "session::list" with:
      """
      {}
      """
    Then the result at "sessions" has 1 items
    When I call "session::create"
    Then the result contains:
      """
      {"session_id": "s_002"}
      """
    And the call delivered events "session::on-created"
