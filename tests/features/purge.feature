@pure
Feature: session::purge deletes one tenant's sessions, whole, each announced
  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"title": "a1", "metadata": {"owner": "A"}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 1}}],
       ["session::create", {"title": "b1", "metadata": {"owner": "B"}}],
       ["session::create", {"title": "a2", "metadata": {"owner": "A", "team": "x"}}],
       ["session::set-status", {"session_id": "s_003", "status": "done"}]]
      """
    And the clock advances by 700 ms

  Scenario: a purge deletes every match, fires on-deleted for each, and stays done after a restart
    # Prevents: a purge taking another tenant, one missing an event, or deletions undone by a restart.
    When I call "session::purge" with:
      """
      {"metadata": {"owner": "A"}}
      """
    Then the result is:
      """
      {"session_ids": ["s_001", "s_003"], "more": false}
      """
    And the call delivered these "session::on-deleted" events in order:
      """
      [{"session_id": "s_001", "timestamp": 1000700, "session_metadata": {"owner": "A"}},
       {"session_id": "s_003", "timestamp": 1000700, "session_metadata": {"owner": "A", "team": "x"}}]
      """
    When the store restarts
    And I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_002"
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the call fails with "session/not_found"

  Scenario: limit bounds one call and more says what is left
    # Prevents: a purge past its limit, or `more` false while matches remain.
    When I call "session::purge" with:
      """
      {"metadata": {"owner": "A"}, "limit": 1}
      """
    Then the result is:
      """
      {"session_ids": ["s_001"], "more": true}
      """
    And the call delivered events "session::on-deleted"
    When I call "session::purge" with:
      """
      {"metadata": {"owner": "A"}, "limit": 1}
      """
    Then the result is:
      """
      {"session_ids": ["s_003"], "more": false}
      """
    And the call delivered events "session::on-deleted"

  Scenario: a dry run lists without deleting or announcing
    # Prevents: a dry run that deletes, or fires events for sessions that still exist.
    When I call "session::purge" with:
      """
      {"metadata": {"owner": "A"}, "status": "done", "dry_run": true}
      """
    Then the result is:
      """
      {"session_ids": ["s_003"], "more": false}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::list" with:
      """
      {"order": "created_asc"}
      """
    Then the listed session ids are "s_001, s_002, s_003"

  Scenario: updated_before spares sessions touched since
    # Prevents: updated_before ignored (a purge of stale sessions taking active ones).
    Given these calls succeed:
      """
      [["session::append", {"session_id": "s_003",
         "message": {"role": "user", "content": [{"type": "text", "text": "new"}], "timestamp": 2}}]]
      """
    When I call "session::purge" with:
      """
      {"metadata": {"owner": "A"}, "updated_before": 1000500}
      """
    Then the result is:
      """
      {"session_ids": ["s_001"], "more": false}
      """
    And the call delivered these "session::on-deleted" events in order:
      """
      [{"session_id": "s_001", "timestamp": 1000700, "session_metadata": {"owner": "A"}}]
      """

  Scenario Outline: a purge without a tenant, or past the cap, is refused and deletes nothing
    # Prevents: an empty filter deleting every tenant's sessions, or a limit past 1,000 accepted.
    When I call "session::purge" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "<field>"
    And the call delivered no events
    When I call "session::list" with:
      """
      {"order": "created_asc"}
      """
    Then the listed session ids are "s_001, s_002, s_003"

    Examples:
      | payload                                  | field    |
      | {}                                       | metadata |
      | {"metadata": {}}                         | metadata |
      | {"metadata": {"owner": "A"}, "limit": 0}    | limit    |
      | {"metadata": {"owner": "A"}, "limit": 1001} | limit    |
