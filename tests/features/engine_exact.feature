@engine
Feature: Exact values over a live iii engine
  Big integers, floats and non-ASCII text cross the bus, the JSONL file and a
  read back unchanged in value and JSON type (the engine at
  III_ENGINE_WS_URL; skips with the reason when none answers).

  Background:
    Given the session-manager surface is registered on the engine over a temp data dir

  Scenario: an integer past 64 bits and a float with no fraction keep their values and types
    # Prevents: 2**70 + 1 coming back as 1.1805916207174113e+21, 3.0 coming back as 3.
    When I call "session::create" over the bus with:
      """
      {"metadata": {"test_run": "${RUN}", "big": 1180591620717411303425, "neg": -18446744073709551619,
                    "float": 3.0, "text": "é"}}
      """
    Then the bus call succeeds with:
      """
      {"meta": {"metadata": {"big": 1180591620717411303425, "neg": -18446744073709551619, "float": 3.0,
                             "text": "é"}}}
      """
    And I remember the bus result "session_id" as "S1"
    And the latest "meta" record of session "${S1}" contains:
      """
      {"metadata": {"big": 1180591620717411303425, "neg": -18446744073709551619, "float": 3.0}}
      """
    When I call "session::get" over the bus with:
      """
      {"session_id": "${S1}"}
      """
    Then the bus call succeeds with:
      """
      {"meta": {"metadata": {"big": 1180591620717411303425, "neg": -18446744073709551619, "float": 3.0,
                             "text": "é"}}}
      """
