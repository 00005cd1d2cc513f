@pure
Feature: session::delete-tree deletes a session and its sub-agent sessions, children first
  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"title": "root", "metadata": {"owner": "A"}}],
       ["session::create", {"title": "child", "metadata": {"parent_session_id": "s_001"}}],
       ["session::create", {"title": "grandchild", "metadata": {"parent_session_id": "s_002"}}],
       ["session::create", {"title": "bystander", "metadata": {"parent_session_id": "s_other"}}],
       ["session::append", {"session_id": "s_003",
         "message": {"role": "user", "content": [{"type": "text", "text": "deep"}], "timestamp": 1}}]]
      """
    And the clock advances by 700 ms

  Scenario: the whole tree goes, deepest first, each announced, and stays gone after a restart
    # Prevents: a parent deleted before its children (an orphan after a crash), a sub-agent left
    # behind, an unrelated session taken, or a deletion undone by a restart.
    When I call "session::delete-tree" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"deleted": ["s_003", "s_002", "s_001"]}
      """
    And the call delivered these "session::on-deleted" events in order:
      """
      [{"session_id": "s_003", "timestamp": 1000700, "session_metadata": {"parent_session_id": "s_002"}},
       {"session_id": "s_002", "timestamp": 1000700, "session_metadata": {"parent_session_id": "s_001"}},
       {"session_id": "s_001", "timestamp": 1000700, "session_metadata": {"owner": "A"}}]
      """
    When the store restarts
    And I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_004"

  Scenario: a second call deletes nothing and announces nothing
    # Prevents: a retried delete-tree failing or firing on-deleted again.
    Given these calls succeed:
      """
      [["session::delete-tree", {"session_id": "s_001"}]]
      """
    When I call "session::delete-tree" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"deleted": []}
      """
    And the call delivered no events
    And 3 "session::on-deleted" events were delivered in total

  Scenario: a subtree goes without its parent
    # Prevents: delete-tree climbing to the parent of the session it was given.
    When I call "session::delete-tree" with:
      """
      {"session_id": "s_002"}
      """
    Then the result is:
      """
      {"deleted": ["s_003", "s_002"]}
      """
    And the call delivered events "session::on-deleted, session::on-deleted"
    When the store restarts
    And I call "session::list" with:
      """
      {"order": "created_asc"}
      """
    Then the listed session ids are "s_001, s_004"

  Scenario: an empty id is refused
    # Prevents: a blank id treated as "every session without a parent".
    When I call "session::delete-tree" with:
      """
      {"session_id": ""}
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "session_id"
    And the call delivered no events
