@pure
Feature: The embedded call() refuses unknown top-level keys
  In-process callers get a misspelt key named instead of silently ignored
  (a deliberate change from the wire, which ignores unknown keys as the
  reference does). Only the top level is strict: nested objects keep
  dropping what they do not define, and the engine's _caller_worker_id is
  always accepted.

  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"title": "kept"}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 1}}]]
      """
    And the clock advances by 500 ms
    And the data dir is snapshotted

  Scenario Outline: a misspelt top-level key is named and nothing happens (<fid>)
    # Prevents: "limt" being dropped so the caller silently gets the default page (or a mutation
    # applied without what the caller meant), and a refused call writing or announcing anything.
    When I call "<fid>" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "<key>: unknown field (expected: "
    And the call delivered no events
    And the data dir is unchanged since the snapshot
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"title": "kept", "updated_at": 1000000, "message_count": 1, "status": "idle"}}
      """

    Examples:
      | fid                     | key         | payload                                                                   |
      | session::messages       | limt        | {"session_id": "s_001", "limt": 1}                                        |
      | session::list           | stauts      | {"stauts": "idle"}                                                        |
      | session::create         | titel       | {"titel": "x"}                                                            |
      | session::set-meta       | metdata     | {"session_id": "s_001", "metdata": {"a": 1}}                              |
      | session::set-status     | status_reason | {"session_id": "s_001", "status": "working", "status_reason": "busy"}   |
      | session::append         | parentid    | {"session_id": "s_001", "parentid": "e_001", "message": {"role": "user", "content": [], "timestamp": 2}} |
      | session::update-message | revision    | {"session_id": "s_001", "entry_id": "e_001", "content": [], "revision": 0} |
      | session::delete         | force       | {"session_id": "s_001", "force": true}                                    |
      | session::mention::get   | session_id  | {"id": "s_001", "session_id": "s_001"}                                    |

  Scenario: the engine's caller key is accepted and nested unknown keys are still dropped
    # Prevents: strictness refusing the key the engine injects into every call, or reaching into
    # nested objects (clients send extra keys in messages and blocks today).
    When I call "session::append" with:
      """
      {"session_id": "s_001", "_caller_worker_id": "w_1",
       "message": {"role": "user", "content": [{"type": "text", "text": "two", "bold": true}],
                   "timestamp": 2, "mood": "calm"}}
      """
    Then the call succeeds
    And the call delivered events "session::on-message-added"
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result at "entry.message" is:
      """
      {"role": "user", "content": [{"type": "text", "text": "two"}], "timestamp": 2}
      """
