@engine
Feature: session::purge and session::delete-tree over a live iii engine
  The production surface registered in-process on the engine at
  III_ENGINE_WS_URL, called from a second worker; skips with the reason
  when no engine answers.

  Background:
    Given the session-manager surface is registered on the engine over a temp data dir

  Scenario: purge and delete-tree answer over the bus and fire on-deleted for each session
    # Prevents: the new functions missing from the worker's registration, answering without
    # deleting, or deleting without announcing over the engine.
    Given an observer "gone" on "session::on-deleted" with filters:
      """
      {"input.session_metadata.test_run": {"$eq": "${RUN}"}}
      """
    When I call "session::create" over the bus with:
      """
      {"title": "tenant", "metadata": {"test_run": "${RUN}", "owner": "A"}}
      """
    Then I remember the bus result "session_id" as "A1"
    When I call "session::create" over the bus with:
      """
      {"title": "root", "metadata": {"test_run": "${RUN}", "owner": "B"}}
      """
    Then I remember the bus result "session_id" as "ROOT"
    When I call "session::create" over the bus with:
      """
      {"title": "child", "metadata": {"test_run": "${RUN}", "parent_session_id": "${ROOT}"}}
      """
    Then I remember the bus result "session_id" as "CHILD"
    When I call "session::purge" over the bus with:
      """
      {"metadata": {"test_run": "${RUN}", "owner": "A"}, "dry_run": true}
      """
    Then the bus call succeeds with:
      """
      {"session_ids": ["${A1}"], "more": false}
      """
    When I call "session::purge" over the bus with:
      """
      {"metadata": {"test_run": "${RUN}", "owner": "A"}}
      """
    Then the bus call succeeds with:
      """
      {"session_ids": ["${A1}"], "more": false}
      """
    When I call "session::delete-tree" over the bus with:
      """
      {"session_id": "${ROOT}"}
      """
    Then the bus call succeeds with:
      """
      {"deleted": ["${CHILD}", "${ROOT}"]}
      """
    And observer "gone" receives exactly 3 events
    When I call "session::get" over the bus with:
      """
      {"session_id": "${ROOT}"}
      """
    Then the bus result is null
    When I call "session::purge" over the bus with:
      """
      {"metadata": {}}
      """
    Then the bus call fails with "session/invalid_request"
