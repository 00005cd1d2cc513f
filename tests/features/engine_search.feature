@engine
Feature: session::search over a live iii engine
  The in-process surface on the engine at III_ENGINE_WS_URL, called from a
  second worker; skips with the reason when no engine answers.

  Background:
    Given the session-manager surface is registered on the engine over a temp data dir

  Scenario: search finds an appended message over the bus, inside its tenant only
    # Prevents: session::search missing from the worker's registrations, or its filter lost on the wire.
    When I call "session::create" over the bus with:
      """
      {"metadata": {"test_run": "${RUN}", "owner": "ann"}}
      """
    Then I remember the bus result "session_id" as "S1"
    When I call "session::append" over the bus with:
      """
      {"session_id": "${S1}", "entry_id": "hit-1",
       "message": {"role": "user", "content": [{"type": "text", "text": "Zanzibar déjà vu ${RUN}"}], "timestamp": 1}}
      """
    And I call "session::search" over the bus with:
      """
      {"query": "zanzibar deja", "metadata": {"test_run": "${RUN}", "owner": "ann"}}
      """
    Then the bus call succeeds with:
      """
      {"hits": [{"session_id": "${S1}", "entry_id": "hit-1", "role": "user",
                 "snippet": "Zanzibar déjà vu ${RUN}", "on_active_path": true}]}
      """
    When I call "session::search" over the bus with:
      """
      {"query": "zanzibar", "metadata": {"test_run": "${RUN}", "owner": "bob"}}
      """
    Then the bus call succeeds with:
      """
      {"hits": []}
      """
