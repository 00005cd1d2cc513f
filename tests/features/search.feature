@pure
Feature: session::search finds entries by their words across sessions
  Words match case- and accent-insensitively, every word must match, the last
  as a prefix; the metadata filter is applied inside the search; hits are
  ranked, paged by cursor, and carry a snippet. Search never fires an event.

  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"metadata": {"owner": "ann"}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "Where is the Café Élysée?"}], "timestamp": 1}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "assistant", "content": [
           {"type": "thinking", "text": "secretthought about the cafe"},
           {"type": "function_call", "id": "c1", "function_id": "maps_lookup", "arguments": {}},
           {"type": "text", "text": "Let me look that up."}],
           "stop_reason": "function_call", "model": "m", "provider": "p", "timestamp": 2}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "function_result", "function_call_id": "c1", "function_id": "maps_lookup",
           "content": [{"type": "text", "text": "Cafe Elysee: 12 rue Royale"}], "timestamp": 3}}],
       ["session::append", {"session_id": "s_001", "custom": {"custom_type": "note", "data": {"text": "cafe"}}}],
       ["session::create", {"metadata": {"owner": "bob"}}],
       ["session::append", {"session_id": "s_002",
         "message": {"role": "user", "content": [{"type": "text", "text": "bob likes the cafe too"}], "timestamp": 4}}]]
      """

  Scenario: words match case- and accent-insensitively, the last one as a prefix
    # Prevents: a case- or accent-sensitive match, or a last word that must be whole while the user types.
    When I call "session::search" with:
      """
      {"query": "CAFE ely", "metadata": {"owner": "ann"}}
      """
    Then the result is:
      """
      {"hits": [{"session_id": "s_001", "entry_id": "e_001", "role": "user", "snippet": "Where is the Café Élysée?",
                 "score": 0.964672, "timestamp": 1000000, "on_active_path": true},
                {"session_id": "s_001", "entry_id": "e_003", "role": "function_result",
                 "snippet": "Cafe Elysee: 12 rue Royale", "score": 0.964672, "timestamp": 1000000,
                 "on_active_path": true}]}
      """
    And the call delivered no events

  Scenario: every word must match, and a word before the last must match whole
    # Prevents: OR semantics, or prefix matching of every word.
    When I call "session::search" with:
      """
      {"query": "caf elysee"}
      """
    Then the result is:
      """
      {"hits": []}
      """

  Scenario: function-call names are searched; thinking and custom entries are not
    # Prevents: leaking reasoning text or bookkeeping entries into search, or missing tool names.
    When I call "session::search" with:
      """
      {"query": "maps_lookup", "roles": ["assistant"]}
      """
    Then the result at "hits" has 1 items
    And the result contains:
      """
      {"hits": [{"session_id": "s_001", "role": "assistant", "snippet": "maps_lookup\nLet me look that up."}]}
      """
    When I call "session::search" with:
      """
      {"query": "secretthought"}
      """
    Then the result is:
      """
      {"hits": []}
      """

  Scenario: the metadata filter keeps another tenant's hits out
    # Prevents: a cross-tenant leak through search.
    When I call "session::search" with:
      """
      {"query": "cafe", "metadata": {"owner": "bob"}}
      """
    Then the result at "hits" has 1 items
    And the result contains:
      """
      {"hits": [{"session_id": "s_002", "snippet": "bob likes the cafe too"}]}
      """

  Scenario: a page holds exactly limit hits while more remain, and the cursor continues it
    # Prevents: short pages when filtered hits are skipped, or a cursor repeating or losing a hit.
    When I call "session::search" with:
      """
      {"query": "cafe", "limit": 2}
      """
    Then the result at "hits" has 2 items
    When I remember "next_cursor" as "next"
    And I call "session::search" with:
      """
      {"query": "cafe", "limit": 2, "cursor": "${next}"}
      """
    Then the result at "hits" has 1 items
    And the result has no "next_cursor"

  Scenario: an edited entry is found by its new text only, a deleted session never
    # Prevents: stale index terms after update-message, or hits from a deleted session.
    When these calls succeed:
      """
      [["session::update-message", {"session_id": "s_002", "entry_id": "e_005",
         "content": [{"type": "text", "text": "bob prefers tea"}]}]]
      """
    And I call "session::search" with:
      """
      {"query": "cafe", "metadata": {"owner": "bob"}}
      """
    Then the result is:
      """
      {"hits": []}
      """
    When I call "session::search" with:
      """
      {"query": "tea"}
      """
    Then the result at "hits" has 1 items
    When these calls succeed:
      """
      [["session::delete", {"session_id": "s_002"}]]
      """
    And I call "session::search" with:
      """
      {"query": "tea"}
      """
    Then the result is:
      """
      {"hits": []}
      """

  Scenario: a fork's copies are found under the fork's id, also after a restart
    # Prevents: forks missing from search, or an index lost (or stale) across a restart.
    When these calls succeed:
      """
      [["session::fork", {"session_id": "s_001", "entry_id": "e_001"}]]
      """
    And the store restarts
    And I call "session::search" with:
      """
      {"query": "where"}
      """
    Then the result at "hits" has 2 items
    And the result contains:
      """
      {"hits": [{"role": "user"}, {"role": "user"}]}
      """

  Scenario Outline: a bad query, limit or cursor is refused naming it
    # Prevents: a traceback or an empty answer where the caller made a mistake.
    When I call "session::search" with:
      """
      <payload>
      """
    Then the call fails with "<code>"
    And the error message contains "<text>"
    And the call delivered no events

    Examples:
      | payload                                  | code                   | text  |
      | {}                                       | session/invalid_request | query |
      | {"query": ""}                            | session/invalid_request | query |
      | {"query": "?!"}                          | session/invalid_request | query |
      | {"query": "cafe", "roles": ["robot"]}    | session/invalid_request | roles |
      | {"query": "cafe", "limit": -1}           | session/invalid_request | limit |
      | {"query": "cafe", "cursor": "%%%"}       | session/invalid_cursor  | cursor |
