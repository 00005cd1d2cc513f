@pure
Feature: session::set-status moves the coarse status, with an optional reason
  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"metadata": {"owner": "u_1"}}], ["session::create", {}]]
      """
    And the clock advances by 100 ms

  Scenario: a real change is stored, bumps updated_at and is announced
    # Prevents: status changes that are not persisted or not delivered to observers.
    When I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "working"}
      """
    Then the result is:
      """
      {"status": "working", "previous_status": "idle"}
      """
    And the call delivered exactly "session::on-status-changed":
      """
      {"session_id": "s_001", "status": "working", "previous_status": "idle", "timestamp": 1000100,
       "session_metadata": {"owner": "u_1"}}
      """
    And the call delivered events "session::on-status-changed"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "working", "status_reason": "<absent>", "updated_at": 1000100}}
      """

  Scenario: a session without metadata gets a status event without session_metadata
    # Prevents: session_metadata: null on events of metadata-less sessions.
    When I call "session::set-status" with:
      """
      {"session_id": "s_002", "status": "error", "reason": "boom"}
      """
    Then the call delivered exactly "session::on-status-changed":
      """
      {"session_id": "s_002", "status": "error", "previous_status": "idle", "status_reason": "boom",
       "timestamp": 1000100}
      """
    And the result is:
      """
      {"previous_status": "idle", "status": "error"}
      """
    And the call delivered events "session::on-status-changed"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_002"}
      """
    Then the result contains:
      """
      {"meta": {"status": "error", "status_reason": "boom", "metadata": "<absent>", "updated_at": 1000100}}
      """
    And the call delivered no events

  Scenario Outline: a reason is kept with working, done and error
    # Prevents: the reason being dropped for any non-idle status (older references kept it only for error).
    When I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "<status>", "reason": "<reason>"}
      """
    Then the result is:
      """
      {"status": "<status>", "previous_status": "idle"}
      """
    And the call delivered "session::on-status-changed" with:
      """
      {"status": "<status>", "status_reason": "<reason>"}
      """
    And the call delivered events "session::on-status-changed"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "<status>", "status_reason": "<reason>"}}
      """

    Examples:
      | status  | reason                   |
      | working | waiting for model        |
      | done    | stopped                  |
      | error   | provider quota exhausted |

  Scenario: a reason-only change is a change and is announced
    # Prevents: a new error reason being swallowed as a no-op (our rule: reason changes emit).
    Given these calls succeed:
      """
      [["session::set-status", {"session_id": "s_001", "status": "error", "reason": "rate limited"}]]
      """
    And the clock advances by 50 ms
    When I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "error", "reason": "DIFFERENT"}
      """
    Then the result is:
      """
      {"status": "error", "previous_status": "error"}
      """
    And the call delivered exactly "session::on-status-changed":
      """
      {"session_id": "s_001", "status": "error", "previous_status": "error", "status_reason": "DIFFERENT",
       "timestamp": 1000150, "session_metadata": {"owner": "u_1"}}
      """
    And the call delivered events "session::on-status-changed"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status_reason": "DIFFERENT", "updated_at": 1000150}}
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status_reason": "DIFFERENT", "updated_at": 1000150}}
      """

  Scenario Outline: the same status with the same resulting reason is a silent no-op
    # Prevents: heartbeat-style repeated set-status calls writing, bumping updated_at or spamming observers.
    Given these calls succeed:
      """
      [["session::set-status", {"session_id": "s_001", "status": "<status>", "reason": <first>}]]
      """
    And the clock advances by 50 ms
    And the data dir is snapshotted
    When I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "<status>", "reason": <again>}
      """
    Then the result is:
      """
      {"status": "<status>", "previous_status": "<status>"}
      """
    And the call delivered no events
    And the data dir is unchanged since the snapshot
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "<status>", "updated_at": <updated_at>}}
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "<status>", "updated_at": <updated_at>}}
      """

    Examples:
      | status  | first    | again    | updated_at |
      | working | null     | null     | 1000100    |
      | error   | "quota"  | "quota"  | 1000100    |
      | idle    | "ignore" | "also"   | 1000000    |

  Scenario: dropping the reason while keeping the status clears it and is announced
    # Prevents: a stale reason ("phase A") lingering after the caller stops sending one.
    Given these calls succeed:
      """
      [["session::set-status", {"session_id": "s_001", "status": "working", "reason": "phase A"}]]
      """
    When I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "working"}
      """
    Then the result is:
      """
      {"status": "working", "previous_status": "working"}
      """
    And the call delivered "session::on-status-changed" with:
      """
      {"status": "working", "previous_status": "working", "status_reason": "<absent>"}
      """
    And the call delivered events "session::on-status-changed"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "working", "status_reason": "<absent>"}}
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "working", "status_reason": "<absent>"}}
      """

  Scenario: moving to another status without a reason clears the old one
    # Prevents: an error reason surviving into the next working phase.
    Given these calls succeed:
      """
      [["session::set-status", {"session_id": "s_001", "status": "error", "reason": "boom"}]]
      """
    When I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "working"}
      """
    Then the result is:
      """
      {"status": "working", "previous_status": "error"}
      """
    And the call delivered "session::on-status-changed" with:
      """
      {"status": "working", "previous_status": "error", "status_reason": "<absent>"}
      """
    And the call delivered events "session::on-status-changed"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "working", "status_reason": "<absent>"}}
      """

  Scenario: idle discards any reason
    # Prevents: an idle session displaying a leftover or newly supplied reason.
    Given these calls succeed:
      """
      [["session::set-status", {"session_id": "s_001", "status": "done", "reason": "finished"}]]
      """
    When I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "idle", "reason": "should not stick"}
      """
    Then the result is:
      """
      {"status": "idle", "previous_status": "done"}
      """
    And the call delivered exactly "session::on-status-changed":
      """
      {"session_id": "s_001", "status": "idle", "previous_status": "done", "timestamp": 1000100,
       "session_metadata": {"owner": "u_1"}}
      """
    And the call delivered events "session::on-status-changed"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "idle", "status_reason": "<absent>"}}
      """

  Scenario: a full turn idle -> working -> done yields exactly two events
    # Prevents: duplicate or missing transitions in a normal agent turn.
    When I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "working"}
      """
    Then the call delivered "session::on-status-changed" with:
      """
      {"status": "working", "previous_status": "idle"}
      """
    And the result is:
      """
      {"previous_status": "idle", "status": "working"}
      """
    And the call delivered events "session::on-status-changed"
    When I call "session::set-status" with:
      """
      {"session_id": "s_001", "status": "done"}
      """
    Then the call delivered "session::on-status-changed" with:
      """
      {"status": "done", "previous_status": "working"}
      """
    And 2 "session::on-status-changed" events were delivered in total
    And the result is:
      """
      {"previous_status": "working", "status": "done"}
      """
    And the call delivered events "session::on-status-changed"
    When I call "session::list" with:
      """
      {"status": "done"}
      """
    Then the listed session ids are "s_001"
    When the store restarts
    And I call "session::list" with:
      """
      {"status": "done"}
      """
    Then the listed session ids are "s_001"

  Scenario: set-status on an unknown session is not_found and creates nothing
    # Prevents: a status write materialising a session that was never created.
    When I call "session::set-status" with:
      """
      {"session_id": "s_404", "status": "working"}
      """
    Then the call fails with "session/not_found"
    And the error message contains "session s_404 does not exist"
    And the call delivered no events
    And the data dir holds the files:
      """
      ["s_001.jsonl", "s_002.jsonl"]
      """
