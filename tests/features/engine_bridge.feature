@engine
Feature: A bridged session-manager stores through a main fs instance
  The main is the in-process fs surface on the engine at III_ENGINE_WS_URL;
  the bridged instance serves its own surface on a second engine (a stand-in
  started by the steps) and reaches the main over its own connection to the
  first engine. Every scenario skips when either engine is unavailable.

  Background:
    Given the session-manager surface is registered on the engine over a temp data dir
    And a bridged session-manager on a second engine stores through the main

  Scenario: an append through the bridged instance lands in the main's JSONL
    # Prevents: a bridged write acknowledged but kept locally, lost, or stored altered by the main.
    When I call "session::create" on the bridged instance with:
      """
      {"title": "bridged", "metadata": {"test_run": "${RUN}"}}
      """
    Then the bus call succeeds with:
      """
      {"meta": {"title": "bridged", "status": "idle", "message_count": 0}}
      """
    And I remember the bus result "session_id" as "S1"
    When I call "session::append" on the bridged instance with:
      """
      {"session_id": "${S1}", "entry_id": "b-1",
       "message": {"role": "user", "content": [{"type": "text", "text": "via bridge"}], "timestamp": 1}}
      """
    Then the bus call succeeds with:
      """
      {"entry_id": "b-1", "parent_id": null}
      """
    And the latest "entry" record "b-1" of session "${S1}" contains:
      """
      {"kind": "message", "revision": 0, "message": {"content": [{"type": "text", "text": "via bridge"}]}}
      """
    And the active leaf recorded for session "${S1}" is "b-1"
    And the latest "meta" record of session "${S1}" contains:
      """
      {"title": "bridged", "message_count": 1}
      """
    When I call "session::append" on the bridged instance with:
      """
      {"session_id": "${S1}", "entry_id": "b-1",
       "message": {"role": "user", "content": [{"type": "text", "text": "replayed"}], "timestamp": 2}}
      """
    Then the bus call succeeds with:
      """
      {"entry_id": "b-1"}
      """
    When I call "session::messages" over the bus with:
      """
      {"session_id": "${S1}"}
      """
    Then the bus call succeeds with:
      """
      {"messages": [{"entry_id": "b-1", "message": {"content": [{"type": "text", "text": "via bridge"}]}}]}
      """
    When I call "session::store::get-meta" on the bridged instance with:
      """
      {"session_id": "${S1}"}
      """
    Then the bus call fails with "session/storage"
    And the bus error names "store protocol is served only by fs instances"

  Scenario: a bridged mutation reaches the observers of both instances exactly once
    # Prevents: the originator missing or doubling its own events, the main's observers missing
    # bridged mutations, or session_metadata filters not holding after the round trip.
    Given an observer "main-added" on "session::on-message-added" with filters:
      """
      {"input.session_metadata.test_run": {"$eq": "${RUN}"}}
      """
    And an observer "bridged-added" on the bridged instance on "session::on-message-added" with filters:
      """
      {"input.session_metadata.test_run": {"$eq": "${RUN}"}}
      """
    And an observer "bridged-other" on the bridged instance on "session::on-message-added" with filters:
      """
      {"input.session_metadata.test_run": {"$eq": "another run"}}
      """
    And an observer "bridged-created" on the bridged instance on "session::on-created" with filters:
      """
      {"input.session_metadata.test_run": {"$eq": "${RUN}"}}
      """
    When I call "session::create" on the bridged instance with:
      """
      {"title": "fan-out", "metadata": {"test_run": "${RUN}"}}
      """
    Then the bus call succeeds with:
      """
      {"meta": {"title": "fan-out"}}
      """
    And I remember the bus result "session_id" as "S1"
    When I call "session::append" on the bridged instance with:
      """
      {"session_id": "${S1}", "entry_id": "fan-1",
       "message": {"role": "user", "content": [{"type": "text", "text": "hello"}], "timestamp": 1}}
      """
    Then the bus call succeeds with:
      """
      {"entry_id": "fan-1"}
      """
    And observer "main-added" receives exactly 1 events
    And observer "bridged-added" receives exactly 1 events
    And observer "bridged-added" events all contain:
      """
      {"session_id": "${S1}", "entry_id": "fan-1", "parent_id": null,
       "message": {"role": "user", "content": [{"type": "text", "text": "hello"}]},
       "session_metadata": {"test_run": "${RUN}"}}
      """
    And observer "main-added" events all contain:
      """
      {"session_id": "${S1}", "entry_id": "fan-1", "session_metadata": {"test_run": "${RUN}"}}
      """
    And observer "bridged-other" receives exactly 0 events
    And observer "bridged-created" receives exactly 1 events
    When I call "session::create" over the bus with:
      """
      {"title": "made on the main", "metadata": {"test_run": "${RUN}"}}
      """
    Then observer "bridged-created" receives exactly 2 events

  Scenario: an unreachable main fails bridged calls with session/storage
    # Prevents: a bridged instance answering from nowhere, hanging, or failing with an unstable code.
    When I call "session::create" on the bridged instance with:
      """
      {"title": "before"}
      """
    Then the bus call succeeds with:
      """
      {"meta": {"title": "before"}}
      """
    And I remember the bus result "session_id" as "S1"
    When the main instance goes away
    And I call "session::get" on the bridged instance with:
      """
      {"session_id": "${S1}"}
      """
    Then the bus call fails with "session/storage"
    And the bus error names "session::store::get-meta"
    When I call "session::append" on the bridged instance with:
      """
      {"session_id": "${S1}", "message": {"role": "user", "content": [], "timestamp": 1}}
      """
    Then the bus call fails with "session/storage"
    When I call "session::create" on the bridged instance with:
      """
      {}
      """
    Then the bus call fails with "session/storage"

  Scenario: two bridged instances appending to one session at once keep one chain on the main
    # Prevents: two bridges forking one session (acknowledged appends off the active path, a short
    # message_count), or an instance's event functions called twice or never for a bridged append.
    Given another bridged session-manager on a third engine stores through the main
    And an observer "main-added" on "session::on-message-added" with filters:
      """
      {"input.session_metadata.test_run": {"$eq": "${RUN}"}}
      """
    And an observer "first-added" on the bridged instance on "session::on-message-added" with filters:
      """
      {"input.session_metadata.test_run": {"$eq": "${RUN}"}}
      """
    And an observer "second-added" on the other bridged instance on "session::on-message-added" with filters:
      """
      {"input.session_metadata.test_run": {"$eq": "${RUN}"}}
      """
    When I call "session::create" on the bridged instance with:
      """
      {"title": "shared", "metadata": {"test_run": "${RUN}"}}
      """
    Then the bus call succeeds with:
      """
      {"meta": {"title": "shared", "message_count": 0}}
      """
    And I remember the bus result "session_id" as "S1"
    When both bridged instances append 200 messages each to session "${S1}" at once
    Then the main's JSONL of session "${S1}" holds one linear chain of every acknowledged append
    And the latest "meta" record of session "${S1}" contains:
      """
      {"title": "shared", "message_count": 400}
      """
    And observer "main-added" saw each acknowledged append exactly once
    And observer "first-added" saw each acknowledged append exactly once
    And observer "second-added" saw each acknowledged append exactly once
