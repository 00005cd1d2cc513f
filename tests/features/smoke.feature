@pure
Feature: Smoke test of the step library
  Background:
    Given a fresh session store

  Scenario: create then read back after a restart
    # Prevents: a created session that does not survive a restart.
    When I call "session::create" with:
      """
      {"title": "hello", "metadata": {"owner": "u_1"}}
      """
    Then the result is:
      """
      {"session_id": "s_001", "meta": {"session_id": "s_001", "title": "hello", "description": "",
       "status": "idle", "metadata": {"owner": "u_1"}, "created_at": 1000000, "updated_at": 1000000,
       "message_count": 0}}
      """
    And the call delivered exactly "session::on-created":
      """
      {"session_id": "s_001", "title": "hello", "description": "", "status": "idle",
       "created_at": 1000000, "session_metadata": {"owner": "u_1"}}
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"title": "hello", "forked_from": "<absent>"}}
      """
    And the call delivered no events
