@pure
Feature: The filesystem store keeps one JSONL log per session and replays it on restart
  Background:
    Given a fresh session store

  Scenario: a restart replays meta, transcript, revisions, leaf, status and draft exactly
    # Prevents: any piece of session state living only in memory.
    Given these calls succeed:
      """
      [["session::create", {"title": "durable", "metadata": {"owner": "u_1"}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 1}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "assistant", "content": [], "stop_reason": "end", "model": "m",
                     "provider": "p", "timestamp": 2}}],
       ["session::update-message", {"session_id": "s_001", "entry_id": "e_002",
         "content": [{"type": "text", "text": "streamed"}]}],
       ["session::set-status", {"session_id": "s_001", "status": "done", "reason": "answered"}],
       ["session::set-draft", {"session_id": "s_001", "draft": "next question"}],
       ["session::set-active-leaf", {"session_id": "s_001", "entry_id": "e_001"}]]
      """
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    And I remember "meta" as "meta_before"
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    And I remember "entry" as "e2_before"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"meta": "${meta_before}"}
      """
    And the result contains:
      """
      {"meta": {"title": "durable", "status": "done", "status_reason": "answered", "draft": "next question",
       "metadata": {"owner": "u_1"}, "message_count": 2}}
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result is:
      """
      {"entry": "${e2_before}"}
      """
    And the result contains:
      """
      {"entry": {"revision": 1, "parent_id": "e_001", "message": {"content": [{"type": "text", "text": "streamed"}]}}}
      """
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001"
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "three"}], "timestamp": 3}}
      """
    Then the result contains:
      """
      {"entry_id": "e_003", "parent_id": "e_001"}
      """
    And the call delivered events "session::on-message-added"
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001, e_003"
    And the call delivered no events
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001, e_003"
    And the call delivered no events

  Scenario: each session is one file named after its id, present from creation
    # Prevents: sessions sharing a file, or a session with no entries leaving nothing on disk.
    When these calls succeed:
      """
      [["session::create", {}], ["session::ensure", {"session_id": "chat-1"}]]
      """
    Then the call delivered events "session::on-created, session::on-created"
    And the data dir holds the files:
      """
      ["chat-1.jsonl", "s_001.jsonl"]
      """
    And the file of session "s_001" has 1 lines
    And the last line of the file of session "s_001" is a "meta" record
    When I call "session::append" with:
      """
      {"session_id": "chat-1", "custom": {"custom_type": "note", "data": {"n": 1}}}
      """
    Then the file of session "chat-1" has 2 lines
    And the last line of the file of session "chat-1" is a "append" record
    And the file of session "s_001" has 1 lines
    And the result is:
      """
      {"entry_id": "e_001", "parent_id": null, "timestamp": 1000000}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    Then reading the active path of "chat-1" gives "e_001"
    And reading the active path of "s_001" gives ""
    And the data dir holds the files:
      """
      ["chat-1.jsonl", "s_001.jsonl"]
      """

  Scenario Outline: a hostile id stays inside data_dir and survives restart and list (<id>)
    # Prevents: path traversal through caller-chosen ids, or ids mangled by the filename encoding.
    When I call "session::ensure" with:
      """
      {"session_id": "<id>", "title": "hostile"}
      """
    Then the result contains:
      """
      {"session_id": "<id>", "created": true, "meta": {"session_id": "<id>", "title": "hostile"}}
      """
    And the call delivered events "session::on-created"
    When I call "session::append" with:
      """
      {"session_id": "<id>", "message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1}}
      """
    Then the call succeeds
    And the data dir holds the files:
      """
      ["<file>"]
      """
    And the file of session "<id>" exists
    And nothing was written outside the data dir
    And the result is:
      """
      {"entry_id": "e_001", "parent_id": null, "timestamp": 1000000}
      """
    And the call delivered events "session::on-message-added"
    When the store restarts
    And I call "session::list" with:
      """
      {}
      """
    Then the result contains:
      """
      {"sessions": [{"session_id": "<id>", "title": "hostile", "message_count": 1}]}
      """
    When I call "session::messages" with:
      """
      {"session_id": "<id>"}
      """
    Then the entry ids at "messages" are "e_001"
    When I call "session::delete" with:
      """
      {"session_id": "<id>"}
      """
    Then the result is:
      """
      {"deleted": true}
      """
    And the data dir holds the files:
      """
      []
      """
    And nothing was written outside the data dir
    And the call delivered events "session::on-deleted"
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "<id>"}
      """
    Then the result is null
    And the call delivered no events
    And the data dir holds the files:
      """
      []
      """

    Examples:

      | id                  | file                              |
      | ../escape/chat 42:? | ..%2Fescape%2Fchat%2042%3A%3F.jsonl |
      | a/b                 | a%2Fb.jsonl                       |
      | ..                  | ...jsonl                          |
      | ünï/çødé            | %C3%BCn%C3%AF%2F%C3%A7%C3%B8d%C3%A9.jsonl |

  Scenario: a torn last line is skipped, and the log stays appendable across restarts
    # Prevents: a crash mid-write bricking the session, or the next record gluing onto the torn one.
    Given these calls succeed:
      """
      [["session::create", {}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "kept"}], "timestamp": 1}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "torn"}], "timestamp": 2}}]]
      """
    And the file of session "s_001" loses its last 12 bytes
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "meta.message_count" is:
      """
      1
      """
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001"
    When I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "after"}], "timestamp": 3}}
      """
    Then the result contains:
      """
      {"entry_id": "e_003", "parent_id": "e_001"}
      """
    And the file of session "s_001" has 3 lines
    And the last line of the file of session "s_001" is a "append" record
    And the call delivered events "session::on-message-added"
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001, e_003"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "meta.message_count" is:
      """
      2
      """

  Scenario: a last record missing only its newline still loads, and the next record starts a new line
    # Prevents: discarding a complete record just because its terminator was lost, or two records on one line.
    Given these calls succeed:
      """
      [["session::create", {}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "whole"}], "timestamp": 1}}]]
      """
    And the file of session "s_001" loses its last 1 bytes
    When the store restarts
    And I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "user", "content": [{"type": "text", "text": "next"}], "timestamp": 2}}
      """
    Then the result contains:
      """
      {"entry_id": "e_002", "parent_id": "e_001"}
      """
    And the file of session "s_001" has 3 lines
    And the call delivered events "session::on-message-added"
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001, e_002"

  Scenario Outline: a malformed line in the middle is skipped and later lines still load (<kind>)
    # Prevents: one corrupt line hiding every record written after it.
    Given these calls succeed:
      """
      [["session::create", {"title": "before"}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 1}}]]
      """
    And this line is appended to the file of session "s_001":
      """
      <line>
      """
    And these calls succeed:
      """
      [["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "two"}], "timestamp": 2}}],
       ["session::set-meta", {"session_id": "s_001", "title": "after"}]]
      """
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001, e_002"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"session_id": "s_001", "title": "after", "message_count": 2}}
      """
    When I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_001"

    Examples:
      | kind                 | line                                                       |
      | garbage text         | this is not JSON at all                                    |
      | invalid JSON         | {"type": "entry", "entry": {"id": "e_9"                    |
      | unknown record type  | {"type": "mystery", "entry_id": "e_001"}                   |
      | not an object        | [1, 2, 3]                                                  |
      | meta of wrong shape  | {"type": "meta", "meta": {"session_id": "s_001", "title": 5}} |
      | entry of wrong shape | {"type": "entry", "entry": {"kind": "message", "id": "e_9"}} |

  Scenario: a line of invalid UTF-8 in the middle is skipped and later lines still load
    # Prevents: a whole-file UTF-8 decode failing the session because of one bad line.
    Given these calls succeed:
      """
      [["session::create", {}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 1}}]]
      """
    And the base64 bytes "//57InR5cGUiOiJtZXRhIiwibWV0YSI6IsMoIn0K" are appended to the file of session "s_001"
    And these calls succeed:
      """
      [["session::set-status", {"session_id": "s_001", "status": "working", "reason": "later"}]]
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "working", "status_reason": "later", "message_count": 1}}
      """
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the entry ids at "messages" are "e_001"

  Scenario: deleting removes the file, and the session stays gone after a restart
    # Prevents: deleted sessions reappearing on restart from a leftover log.
    Given these calls succeed:
      """
      [["session::create", {}], ["session::create", {}], ["session::delete", {"session_id": "s_001"}]]
      """
    Then the data dir holds the files:
      """
      ["s_002.jsonl"]
      """
    When the store restarts
    And I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_002"
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is null

  Scenario: list after a restart finds every session with its latest meta
    # Prevents: list reading only sessions touched since start, or stale metas from early records.
    Given these calls succeed:
      """
      [["session::create", {"metadata": {"team": "a"}}], ["session::create", {"metadata": {"team": "b"}}],
       ["session::create", {"metadata": {"team": "a"}}]]
      """
    And the clock advances by 10 ms
    And these calls succeed:
      """
      [["session::set-status", {"session_id": "s_001", "status": "working"}]]
      """
    And the clock advances by 10 ms
    And these calls succeed:
      """
      [["session::set-meta", {"session_id": "s_002", "metadata": {"team": "a"}}]]
      """
    When the store restarts
    And I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_002, s_001, s_003"
    When I call "session::list" with:
      """
      {"metadata": {"team": "a"}, "status": "idle", "order": "created_asc"}
      """
    Then the listed session ids are "s_002, s_003"
    And the call delivered no events
