@pure
Feature: Malformed requests and unknown sessions fail cleanly, with no side effect
  Every function validates its payload before any logic runs: a shape
  problem is session/invalid_request naming the offending field, nothing is
  written and nothing is announced.

  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"title": "kept", "metadata": {"owner": "u_1"}}],
       ["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "one"}], "timestamp": 1}}]]
      """
    And the clock advances by 500 ms
    And the data dir is snapshotted

  Scenario Outline: a payload that is not a JSON object is rejected by <fid>
    # Prevents: a list or string payload crashing a handler (TypeError) instead of a clean invalid_request.
    When I call "<fid>" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "payload: expected a JSON object"
    And the call delivered no events
    And the data dir is unchanged since the snapshot
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"title": "kept", "updated_at": 1000000, "message_count": 1, "status": "idle"}}
      """

    Examples:
      | fid                         | payload            |
      | session::create             | []                 |
      | session::ensure             | "chat-42"          |
      | session::get                | ["s_001"]          |
      | session::list               | "all"              |
      | session::set-meta           | [{"session_id": "s_001"}] |
      | session::set-status         | "working"          |
      | session::set-draft          | "text"             |
      | session::delete             | "s_001"            |
      | session::append             | []                 |
      | session::append-many        | []                 |
      | session::update-message     | "e_001"            |
      | session::messages           | 42                 |
      | session::messages-range     | []                 |
      | session::messages-tail      | true               |
      | session::get-message        | ["e_001"]          |
      | session::fork               | "s_001"            |
      | session::set-active-leaf    | []                 |
      | session::put-attachment     | "aGk="             |
      | session::get-attachment     | []                 |
      | session::list-attachments   | ["s_001"]          |
      | session::delete-attachment  | 1.5                |
      | session::mention::search    | "kept"             |
      | session::mention::get       | ["s_001"]          |

  Scenario Outline: a missing required field is named (<fid>)
    # Prevents: KeyError/None deep in a handler, or a default silently standing in for a required field.
    When I call "<fid>" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "<field>: Field required"
    And the call delivered no events
    And the data dir is unchanged since the snapshot

    Examples:
      | fid                         | payload                                                                  | field                 |
      | session::ensure             | {"title": "x"}                                                           | session_id            |
      | session::get                | {}                                                                       | session_id            |
      | session::set-meta           | {"title": "x"}                                                           | session_id            |
      | session::set-status         | {"session_id": "s_001"}                                                  | status                |
      | session::set-draft          | {"draft": "x"}                                                           | session_id            |
      | session::delete             | {}                                                                       | session_id            |
      | session::append             | {"message": {"role": "user", "content": [], "timestamp": 1}}             | session_id            |
      | session::append             | {"session_id": "s_001", "message": {"role": "user", "content": []}}      | message.user.timestamp |
      | session::append-many        | {"session_id": "s_001"}                                                  | messages              |
      | session::update-message     | {"session_id": "s_001", "entry_id": "e_001"}                             | content               |
      | session::messages           | {"limit": 5}                                                             | session_id            |
      | session::messages-range     | {"entry_ids": ["e_001"]}                                                 | session_id            |
      | session::messages-tail      | {}                                                                       | session_id            |
      | session::get-message        | {"session_id": "s_001"}                                                  | entry_id              |
      | session::fork               | {"session_id": "s_001"}                                                  | entry_id              |
      | session::set-active-leaf    | {"session_id": "s_001"}                                                  | entry_id              |
      | session::put-attachment     | {"session_id": "s_001", "name": "a.txt", "mime": "text/plain"}           | data                  |
      | session::get-attachment     | {"session_id": "s_001"}                                                  | attachment_id         |
      | session::list-attachments   | {}                                                                       | session_id            |
      | session::delete-attachment  | {"session_id": "s_001"}                                                  | attachment_id         |
      | session::mention::get       | {}                                                                       | id                    |

  Scenario Outline: a value of the wrong JSON type is named (<fid> <field>)
    # Prevents: lax coercion ("5" -> 5, true -> 1, 42 -> "42") storing values of the wrong type.
    When I call "<fid>" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "<field>:"
    And the call delivered no events
    And the data dir is unchanged since the snapshot
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"title": "kept", "updated_at": 1000000, "message_count": 1, "draft": "<absent>"}}
      """

    Examples:
      | fid                         | payload                                                                      | field               |
      | session::create             | {"title": 12345}                                                             | title               |
      | session::ensure             | {"session_id": "chat-1", "metadata": "owner"}                                | metadata            |
      | session::get                | {"session_id": 42}                                                           | session_id          |
      | session::list               | {"limit": "5"}                                                               | limit               |
      | session::list               | {"limit": true}                                                              | limit               |
      | session::set-meta           | {"session_id": "s_001", "description": 7}                                    | description         |
      | session::set-status         | {"session_id": "s_001", "status": "working", "reason": 5}                    | reason              |
      | session::set-draft          | {"session_id": "s_001", "draft": 5}                                          | draft               |
      | session::set-draft          | {"session_id": "s_001", "attachment_ids": "a_001"}                           | attachment_ids      |
      | session::delete             | {"session_id": ["s_001"]}                                                    | session_id          |
      | session::append             | {"session_id": "s_001", "custom": {"custom_type": "x"}, "origin": "agent"}   | origin              |
      | session::append             | {"session_id": "s_001", "message": {"role": "user", "content": [], "timestamp": "1"}} | message.user.timestamp |
      | session::append-many        | {"session_id": "s_001", "messages": {}}                                      | messages            |
      | session::update-message     | {"session_id": "s_001", "entry_id": "e_001", "content": [], "expected_revision": "0"} | expected_revision |
      | session::update-message     | {"session_id": "s_001", "entry_id": "e_001", "content": [], "expected_revision": true} | expected_revision |
      | session::messages           | {"session_id": "s_001", "include_custom": "yes"}                             | include_custom      |
      | session::messages-range     | {"session_id": "s_001", "entry_ids": "e_001"}                                | entry_ids           |
      | session::messages-tail      | {"session_id": "s_001", "limit": true}                                       | limit               |
      | session::get-message        | {"session_id": "s_001", "entry_id": "e_001", "include_image_data": "no"}     | include_image_data  |
      | session::fork               | {"session_id": "s_001", "entry_id": "e_001", "title": 5}                     | title               |
      | session::set-active-leaf    | {"session_id": "s_001", "entry_id": 1}                                       | entry_id            |
      | session::put-attachment     | {"session_id": "s_001", "name": "a.txt", "mime": "text/plain", "data": 5}    | data                |
      | session::get-attachment     | {"session_id": "s_001", "attachment_id": "a_001", "include_data": "yes"}     | include_data        |
      | session::list-attachments   | {"session_id": 1}                                                            | session_id          |
      | session::delete-attachment  | {"session_id": "s_001", "attachment_id": false}                              | attachment_id       |
      | session::mention::search    | {"query": 5}                                                                 | query               |
      | session::mention::get       | {"id": 5}                                                                    | id                  |

  Scenario Outline: an unknown enum value is rejected (<fid> <field>)
    # Prevents: statuses, orders, roles or block types outside the contract being stored or silently defaulted.
    When I call "<fid>" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "<field>:"
    And the call delivered no events
    And the data dir is unchanged since the snapshot
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"status": "idle", "updated_at": 1000000, "message_count": 1}}
      """

    Examples:
      | fid                      | payload                                                                                     | field        |
      | session::set-status      | {"session_id": "s_001", "status": "halted"}                                                 | status       |
      | session::set-status      | {"session_id": "s_001", "status": "waiting"}                                                | status       |
      | session::list            | {"status": "halted"}                                                                        | status       |
      | session::list            | {"order": "alphabetical"}                                                                   | order        |
      | session::append          | {"session_id": "s_001", "message": {"role": "robot", "content": [], "timestamp": 1}}         | message      |
      | session::append-many     | {"session_id": "s_001", "messages": [{"role": "robot", "content": [], "timestamp": 1}]}      | messages.0   |
      | session::messages        | {"session_id": "s_001", "roles": ["robot"]}                                                 | roles.0      |
      | session::update-message  | {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "video", "url": "x"}]}     | content.0    |
      | session::append          | {"session_id": "s_001", "message": {"role": "assistant", "content": [], "stop_reason": "finished", "model": "m", "provider": "p", "timestamp": 1}} | message.assistant.stop_reason |

  Scenario Outline: an empty id is rejected (<fid> <field>)
    # Prevents: "" reaching the store as a session or entry id (a ".jsonl" file, an unaddressable entry).
    When I call "<fid>" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "<field>:"
    And the call delivered no events
    And the data dir is unchanged since the snapshot
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"updated_at": 1000000, "message_count": 1}}
      """

    Examples:
      | fid                         | payload                                                                                        | field           |
      | session::ensure             | {"session_id": ""}                                                                             | session_id      |
      | session::get                | {"session_id": ""}                                                                             | session_id      |
      | session::set-meta           | {"session_id": "", "title": "x"}                                                               | session_id      |
      | session::set-status         | {"session_id": "", "status": "done"}                                                           | session_id      |
      | session::set-draft          | {"session_id": "", "draft": "x"}                                                               | session_id      |
      | session::set-draft          | {"session_id": "s_001", "attachment_ids": [""]}                                                | attachment_ids.0 |
      | session::delete             | {"session_id": ""}                                                                             | session_id      |
      | session::append             | {"session_id": "", "custom": {"custom_type": "x"}}                                             | session_id      |
      | session::append             | {"session_id": "s_001", "custom": {"custom_type": "x"}, "entry_id": ""}                        | entry_id        |
      | session::append             | {"session_id": "s_001", "custom": {"custom_type": "x"}, "parent_id": ""}                       | parent_id       |
      | session::append-many        | {"session_id": "", "messages": [{"role": "user", "content": [], "timestamp": 1}]}              | session_id      |
      | session::update-message     | {"session_id": "s_001", "entry_id": "", "content": []}                                         | entry_id        |
      | session::messages           | {"session_id": "s_001", "from_entry_id": ""}                                                   | from_entry_id   |
      | session::messages-range     | {"session_id": "s_001", "entry_ids": [""]}                                                     | entry_ids.0     |
      | session::messages-tail      | {"session_id": "s_001", "before_entry_id": ""}                                                 | before_entry_id |
      | session::get-message        | {"session_id": "s_001", "entry_id": ""}                                                        | entry_id        |
      | session::fork               | {"session_id": "s_001", "entry_id": ""}                                                        | entry_id        |
      | session::set-active-leaf    | {"session_id": "", "entry_id": "e_001"}                                                        | session_id      |
      | session::put-attachment     | {"session_id": "", "name": "a.txt", "mime": "text/plain", "data": "aGk="}                      | session_id      |
      | session::get-attachment     | {"session_id": "s_001", "attachment_id": ""}                                                   | attachment_id   |
      | session::list-attachments   | {"session_id": ""}                                                                             | session_id      |
      | session::delete-attachment  | {"session_id": "s_001", "attachment_id": ""}                                                   | attachment_id   |

  Scenario Outline: a negative limit is rejected (<fid>)
    # Prevents: a negative page size slicing from the end of a list.
    When I call "<fid>" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "limit:"
    And the call delivered no events

    Examples:
      | fid                       | payload                                      |
      | session::list             | {"limit": -1}                                |
      | session::messages         | {"session_id": "s_001", "limit": -1}         |
      | session::messages-range   | {"session_id": "s_001", "entry_ids": [], "limit": -5} |
      | session::messages-tail    | {"session_id": "s_001", "limit": -1}         |
      | session::mention::search  | {"limit": -1}                                |

  Scenario Outline: append needs exactly one of message and custom
    # Prevents: an entry with both payloads (ambiguous kind) or neither (an empty entry) being stored.
    When I call "session::append" with:
      """
      <payload>
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "message, custom:"
    And the call delivered no events
    And the data dir is unchanged since the snapshot
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "include_custom": true}
      """
    Then the entry ids at "messages" are "e_001"

    Examples:
      | payload                                                                                                                           |
      | {"session_id": "s_001"}                                                                                                           |
      | {"session_id": "s_001", "message": null, "custom": null}                                                                          |
      | {"session_id": "s_001", "message": {"role": "user", "content": [], "timestamp": 1}, "custom": {"custom_type": "x"}}                 |

  Scenario Outline: mutations and path reads of an unknown session are not_found (<fid>)
    # Prevents: a mutation creating a session implicitly, or a path read returning an empty page for a missing session.
    When I call "<fid>" with:
      """
      <payload>
      """
    Then the call fails with "session/not_found"
    And the error message contains "session s_404 does not exist"
    And the call delivered no events
    And the data dir is unchanged since the snapshot
    When I call "session::get" with:
      """
      {"session_id": "s_404"}
      """
    Then the result is null

    Examples:
      | fid                         | payload                                                                                  |
      | session::set-meta           | {"session_id": "s_404", "title": "x"}                                                    |
      | session::set-status         | {"session_id": "s_404", "status": "working"}                                             |
      | session::set-draft          | {"session_id": "s_404", "draft": "x"}                                                    |
      | session::append             | {"session_id": "s_404", "custom": {"custom_type": "x"}}                                  |
      | session::append-many        | {"session_id": "s_404", "messages": [{"role": "user", "content": [], "timestamp": 1}]}   |
      | session::update-message     | {"session_id": "s_404", "entry_id": "e_001", "content": []}                              |
      | session::fork               | {"session_id": "s_404", "entry_id": "e_001"}                                             |
      | session::set-active-leaf    | {"session_id": "s_404", "entry_id": "e_001"}                                             |
      | session::put-attachment     | {"session_id": "s_404", "name": "a.txt", "mime": "text/plain", "data": "aGk="}           |
      | session::delete-attachment  | {"session_id": "s_404", "attachment_id": "a_001"}                                        |
      | session::messages           | {"session_id": "s_404"}                                                                  |
      | session::messages-range     | {"session_id": "s_404", "entry_ids": ["e_001"]}                                          |
      | session::messages-tail      | {"session_id": "s_404"}                                                                  |
      | session::list-attachments   | {"session_id": "s_404"}                                                                  |

  Scenario Outline: reads of unknown ids are null, not errors (<fid>)
    # Prevents: point reads raising for unknown ids (callers use null to mean "not there").
    When I call "<fid>" with:
      """
      <payload>
      """
    Then the result is null
    And the call delivered no events
    And the data dir is unchanged since the snapshot

    Examples:
      | fid                     | payload                                              |
      | session::get            | {"session_id": "s_404"}                              |
      | session::get-message    | {"session_id": "s_404", "entry_id": "e_001"}         |
      | session::get-message    | {"session_id": "s_001", "entry_id": "e_404"}         |
      | session::get-attachment | {"session_id": "s_404", "attachment_id": "a_001"}    |
      | session::get-attachment | {"session_id": "s_001", "attachment_id": "a_404"}    |
      | session::mention::get   | {"id": "s_404"}                                      |
