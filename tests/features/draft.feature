@pure
Feature: session::set-draft parks unsent composer text, silently
  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"metadata": {"owner": "u_1"}}], ["session::create", {}]]
      """
    And an observer "meta watcher" watches "session::on-meta-updated"
    And the clock advances by 250 ms

  Scenario: a parked draft reads back verbatim through get, list and a restart
    # Prevents: drafts being trimmed, lost on restart, or invisible to list.
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "  half-typed thought\n"}
      """
    Then the result is:
      """
      {"draft": "  half-typed thought\n", "attachments": []}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "meta.draft" is:
      """
      "  half-typed thought\n"
      """
    When I call "session::list" with:
      """
      {"order": "created_asc"}
      """
    Then the result contains:
      """
      {"sessions": [{"session_id": "s_001", "draft": "  half-typed thought\n"},
                    {"session_id": "s_002", "draft": "<absent>"}]}
      """

  Scenario: saving a draft wakes no observer and leaves updated_at and list order alone
    # Prevents: keystroke-rate draft saves re-ordering the chat list or flooding observers.
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "typing..."}
      """
    Then the call delivered no events
    And observer "meta watcher" received 0 events
    And the result is:
      """
      {"attachments": [], "draft": "typing..."}
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "typing...", "updated_at": 1000000}}
      """
    When I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_002, s_001"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "typing...", "updated_at": 1000000}}
      """
    When I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_002, s_001"

  Scenario Outline: an absent, null, empty or blank draft clears the parked one
    # Prevents: a blank composer leaving a "draft" marker, or a cleared draft showing as "" instead of absent.
    Given these calls succeed:
      """
      [["session::set-draft", {"session_id": "s_001", "draft": "something"}]]
      """
    When I call "session::set-draft" with:
      """
      <request>
      """
    Then the result is:
      """
      {"draft": null, "attachments": []}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "<absent>", "updated_at": 1000000}}
      """
    When I call "session::list" with:
      """
      {"order": "created_asc", "limit": 1}
      """
    Then the result contains:
      """
      {"sessions": [{"session_id": "s_001", "draft": "<absent>"}]}
      """

    Examples:
      | request                                        |
      | {"session_id": "s_001"}                        |
      | {"session_id": "s_001", "draft": null}         |
      | {"session_id": "s_001", "draft": ""}           |
      | {"session_id": "s_001", "draft": "   \u0009\u000a "} |

  Scenario: setting the same draft again writes nothing
    # Prevents: repeated identical autosaves growing the session log.
    Given these calls succeed:
      """
      [["session::set-draft", {"session_id": "s_001", "draft": "same"}]]
      """
    And the data dir is snapshotted
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "same"}
      """
    Then the result is:
      """
      {"draft": "same", "attachments": []}
      """
    And the call delivered no events
    And the data dir is unchanged since the snapshot
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "same"}}
      """
    And the call delivered no events

  Scenario: set-draft on an unknown session is not_found and creates nothing
    # Prevents: a draft save materialising a session file for an unknown id.
    When I call "session::set-draft" with:
      """
      {"session_id": "s_404", "draft": "lost"}
      """
    Then the call fails with "session/not_found"
    And the error message contains "session s_404 does not exist"
    And the call delivered no events
    And the data dir holds the files:
      """
      ["s_001.jsonl", "s_002.jsonl"]
      """
