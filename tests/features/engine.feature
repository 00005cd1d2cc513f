@engine
Feature: The session-manager surface over a live iii engine
  The production surface registered in-process on the engine at
  III_ENGINE_WS_URL (default ws://127.0.0.1:49134), over a temp data_dir,
  called from a second worker. Every scenario skips, with the reason, when
  no engine answers or when that engine already runs a session-manager.

  Background:
    Given the session-manager surface is registered on the engine over a temp data dir

  Scenario: create, append and read back over the bus, with the JSONL on disk
    # Prevents: a bus call that answers but does not persist, or persists something else.
    When I call "session::create" over the bus with:
      """
      {"title": "bus lifecycle", "metadata": {"test_run": "${RUN}"}}
      """
    Then the bus call succeeds with:
      """
      {"meta": {"title": "bus lifecycle", "status": "idle", "message_count": 0,
                "metadata": {"test_run": "${RUN}"}}}
      """
    And I remember the bus result "session_id" as "S1"
    And the latest "meta" record of session "${S1}" contains:
      """
      {"title": "bus lifecycle", "status": "idle"}
      """
    When I call "session::append" over the bus with:
      """
      {"session_id": "${S1}", "entry_id": "idem-1",
       "message": {"role": "user", "content": [{"type": "text", "text": "first"}], "timestamp": 1}}
      """
    Then the bus call succeeds with:
      """
      {"entry_id": "idem-1", "parent_id": null}
      """
    And the latest "entry" record "idem-1" of session "${S1}" contains:
      """
      {"kind": "message", "revision": 0, "message": {"content": [{"type": "text", "text": "first"}]}}
      """
    And the active leaf recorded for session "${S1}" is "idem-1"
    When I call "session::append" over the bus with:
      """
      {"session_id": "${S1}", "entry_id": "idem-1",
       "message": {"role": "user", "content": [{"type": "text", "text": "replayed"}], "timestamp": 2}}
      """
    Then the bus call succeeds with:
      """
      {"entry_id": "idem-1"}
      """
    When I call "session::messages" over the bus with:
      """
      {"session_id": "${S1}"}
      """
    Then the bus call succeeds with:
      """
      {"messages": [{"entry_id": "idem-1", "message": {"content": [{"type": "text", "text": "first"}]}}]}
      """
    When I call "session::get" over the bus with:
      """
      {"session_id": "${S1}"}
      """
    Then the bus call succeeds with:
      """
      {"meta": {"message_count": 1}}
      """
    When I call "session::get" over the bus with:
      """
      {"session_id": "never-created"}
      """
    Then the bus result is null

  Scenario: observers with filters receive exactly the matching events
    # Prevents: filters on session_id, role or session_metadata leaking other sessions' events.
    Given an observer "scoped" on "session::on-message-added" with filters:
      """
      {"input.session_id": {"$eq": "obs-s1"}}
      """
    And an observer "users" on "session::on-message-added" with filters:
      """
      {"input.message.role": {"$eq": "user"}, "input.session_metadata.owner": {"$eq": "${RUN}"}}
      """
    And an observer "tenant" on "session::on-created" with filters:
      """
      {"input.session_metadata.owner": {"$eq": "${RUN}"}}
      """
    When these bus calls succeed:
      """
      [["session::ensure", {"session_id": "obs-s1", "metadata": {"owner": "${RUN}"}}],
       ["session::ensure", {"session_id": "obs-s2", "metadata": {"owner": "someone-else"}}],
       ["session::append", {"session_id": "obs-s2", "message": {"role": "user", "timestamp": 1,
                             "content": [{"type": "text", "text": "noise"}]}}],
       ["session::append", {"session_id": "obs-s1", "message": {"role": "user", "timestamp": 2,
                             "content": [{"type": "text", "text": "signal"}]}}],
       ["session::append", {"session_id": "obs-s1", "custom": {"custom_type": "marker"}}],
       ["session::append", {"session_id": "obs-s1", "message": {"role": "assistant", "timestamp": 3,
                             "stop_reason": "end", "model": "m", "provider": "p",
                             "content": [{"type": "text", "text": "reply"}]}}]]
      """
    Then observer "scoped" receives exactly 3 events
    And observer "scoped" events all contain:
      """
      {"session_id": "obs-s1", "session_metadata": {"owner": "${RUN}"}}
      """
    And observer "users" receives exactly 1 events
    And observer "users" events all contain:
      """
      {"session_id": "obs-s1", "message": {"role": "user", "content": [{"type": "text", "text": "signal"}]}}
      """
    And observer "tenant" receives exactly 1 events
    And observer "tenant" events all contain:
      """
      {"session_id": "obs-s1", "status": "idle"}
      """

  Scenario: a streamed reply is observed with increasing revisions
    # Prevents: streaming updates that skip, repeat or lose revisions on the bus.
    Given an observer "stream" on "session::on-message-updated" with filters:
      """
      {"input.session_id": {"$eq": "stream-s1"}, "input.message.role": {"$in": ["assistant"]}}
      """
    And an observer "status" on "session::on-status-changed" with filters:
      """
      {"input.session_id": {"$eq": "stream-s1"}}
      """
    When these bus calls succeed:
      """
      [["session::ensure", {"session_id": "stream-s1"}],
       ["session::set-status", {"session_id": "stream-s1", "status": "working"}],
       ["session::append", {"session_id": "stream-s1", "entry_id": "reply-1", "message": {
           "role": "assistant", "timestamp": 1, "stop_reason": "end", "model": "m", "provider": "p",
           "content": []}}]]
      """
    And the reply "reply-1" of session "stream-s1" streams 20 updates over the bus
    And I call "session::set-status" over the bus with:
      """
      {"session_id": "stream-s1", "status": "done"}
      """
    Then observer "stream" receives exactly 20 events
    And observer "stream" saw revisions 1 to 20 of "reply-1", the highest with text "token 20"
    And observer "status" receives exactly 2 events
    When I call "session::get-message" over the bus with:
      """
      {"session_id": "stream-s1", "entry_id": "reply-1"}
      """
    Then the bus call succeeds with:
      """
      {"entry": {"revision": 20, "message": {"content": [{"type": "text", "text": "token 20"}]}}}
      """

  Scenario: errors cross the bus with their stable codes
    # Prevents: callers receiving prose or a generic failure instead of the session/* code.
    When I call "session::set-status" over the bus with:
      """
      {"session_id": "missing-session", "status": "working"}
      """
    Then the bus call fails with "session/not_found"
    When I call "session::append" over the bus with:
      """
      {"session_id": "missing-session"}
      """
    Then the bus call fails with "session/not_found"
    When I call "session::get" over the bus with:
      """
      {"session_id": ""}
      """
    Then the bus call fails with "session/invalid_request"
    When I call "session::update-message" over the bus with:
      """
      {"session_id": "missing-session", "entry_id": "e", "content": "not a list"}
      """
    Then the bus call fails with "session/invalid_request"

  Scenario: the session-manager process boots from configuration, reloads, and stops cleanly
    # Prevents: a worker binary that only works in-process (boot, config reload, SIGTERM untested).
    Given the in-process surface is withdrawn
    And the session-manager process runs with data dir "a"
    When I call "session::create" over the bus with:
      """
      {"title": "from the process", "metadata": {"test_run": "${RUN}"}}
      """
    Then the bus call succeeds with:
      """
      {"meta": {"title": "from the process"}}
      """
    And I remember the bus result "session_id" as "P1"
    And the process data dir "a" holds the session "${P1}"
    Given an observer "resync" on "session::on-created" with filters:
      """
      {"input.session_metadata.test_run": {"$eq": "${RUN}"}}
      """
    When the configuration sets the process data dir to "b"
    Then observer "resync" receives exactly 0 events
    When I call "session::config-status" over the bus with:
      """
      {}
      """
    Then the bus call succeeds with:
      """
      {"last_outcome": "applied", "last_error": null}
      """
    When I call "session::get" over the bus with:
      """
      {"session_id": "${P1}"}
      """
    Then the bus result is null
    When the configuration sets the process data dir to "a"
    Then observer "resync" receives exactly 1 events
    And observer "resync" events all contain:
      """
      {"session_id": "${P1}", "title": "from the process"}
      """
    When the session-manager process gets SIGTERM
    Then it exits with status 0 and logged "session-manager stopped"
