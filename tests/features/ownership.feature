@pure
Feature: One owner per data dir, read-only inspection, exact values
  A writable store owns its data dir: a second writable open, in this process
  or another, is refused before it touches anything, and a read-only store can
  inspect the directory meanwhile without writing. Stored values round-trip
  exactly; what JSON cannot carry is refused before anything is written.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "owned"}
      """

  Scenario: a second writable open of the data dir is refused and touches nothing
    # Prevents: two stores on one directory diverging (lost appends, a delete undone by the other).
    Given the data dir is snapshotted
    When a second writable store opens the data dir
    Then the second open fails with "session/storage" containing "is already open for writing by process"
    And the data dir is unchanged since the snapshot
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"title": "owned"}}
      """

  Scenario: a read-only store follows the owner and refuses every mutation
    # Prevents: an inspection that compacts or repairs the owner's files, or serves a stale copy.
    Given a read-only store opens the data dir
    And the data dir is snapshotted
    When I call "session::set-meta" on the read-only store with:
      """
      {"session_id": "s_001", "title": "changed"}
      """
    Then the read-only call fails with "session/storage" containing "read-only"
    And the data dir is unchanged since the snapshot
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "later"}], "timestamp": 1}}
      """
    And I call "session::get" on the read-only store with:
      """
      {"session_id": "s_001"}
      """
    Then the read-only call succeeds with:
      """
      {"meta": {"title": "owned", "message_count": 1}}
      """

  Scenario: big integers and floats keep their exact values and types across a restart
    # Prevents: 2**70 + 1 reading back as 1.1805916207174113e+21, 3.0 reading back as 3.
    When I call "session::set-meta" with:
      """
      {"session_id": "s_001", "metadata": {"big": 1180591620717411303425, "neg": -18446744073709551619,
                                           "float": 3.0, "text": "é\u2028"}}
      """
    Then the result at "meta.metadata" is:
      """
      {"big": 1180591620717411303425, "neg": -18446744073709551619, "float": 3.0, "text": "é\u2028"}
      """
    And the call delivered exactly "session::on-meta-updated":
      """
      {"session_id": "s_001", "title": "owned", "description": "", "timestamp": 1000000,
       "metadata": {"big": 1180591620717411303425, "neg": -18446744073709551619, "float": 3.0, "text": "é\u2028"},
       "session_metadata": {"big": 1180591620717411303425, "neg": -18446744073709551619, "float": 3.0, "text": "é\u2028"}}
      """
    And the call delivered events "session::on-meta-updated"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "meta.metadata" is:
      """
      {"big": 1180591620717411303425, "neg": -18446744073709551619, "float": 3.0, "text": "é\u2028"}
      """

  Scenario: NaN is refused naming the field, before anything is written
    # Prevents: NaN stored as null and echoed back as a token that is not JSON.
    Given the data dir is snapshotted
    When I call "session::set-meta" with:
      """
      {"session_id": "s_001", "metadata": {"scores": [1, NaN]}}
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "metadata.scores.1"
    And the call delivered no events
    And the data dir is unchanged since the snapshot
