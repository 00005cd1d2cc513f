@pure
Feature: session::update-message replaces a message's content in place
  Updates serve streaming and pruning: the content (and details or usage
  where the role allows) is replaced, the entry's revision rises by one per
  successful update, and one on-message-updated carries the whole message.
  expected_revision turns an update into a compare-and-set.

  Background:
    Given a fresh session store
    And I call "session::create" with:
      """
      {"title": "updates", "metadata": {"owner": "u_1"}}
      """

  Scenario: each successful update raises the revision by one and announces the full message
    # Prevents: revisions that stall or jump, or events that carry only a delta instead of the message.
    Given I append an empty assistant message to "s_001"
    And the clock advances by 100 ms
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "Hel"}]}
      """
    Then the result is:
      """
      {"updated": true, "revision": 1}
      """
    And the call delivered events "session::on-message-updated"
    And the call delivered exactly "session::on-message-updated":
      """
      {"session_id": "s_001", "entry_id": "e_001", "revision": 1, "timestamp": 1000100,
       "message": {"role": "assistant", "content": [{"type": "text", "text": "Hel"}], "stop_reason": "end",
                   "model": "m-1", "provider": "p-1", "timestamp": 42},
       "session_metadata": {"owner": "u_1"}}
      """
    When the clock advances by 100 ms
    And I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "Hello world"}]}
      """
    Then the result is:
      """
      {"updated": true, "revision": 2}
      """
    And the call delivered "session::on-message-updated" with:
      """
      {"revision": 2, "timestamp": 1000200, "message": {"content": [{"type": "text", "text": "Hello world"}]}}
      """
    And the call delivered events "session::on-message-updated"
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 2, "message": {"content": [{"type": "text", "text": "Hello world"}]}}}
      """
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 1, "updated_at": 1000200}}
      """

  Scenario: content is replaced wholesale and every other message field is kept
    # Prevents: an update merging old and new blocks, or wiping stop_reason, model, usage or the message timestamp.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "assistant", "stop_reason": "length", "model": "m-2", "provider": "p-2",
        "usage": {"input": 5, "output": 7}, "agent": "writer", "timestamp": 9,
        "content": [{"type": "thinking", "text": "plan"}, {"type": "text", "text": "draft"}]}}
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "final"}]}
      """
    Then the result is:
      """
      {"updated": true, "revision": 1}
      """
    And the call delivered events "session::on-message-updated"
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result at "entry.message" is:
      """
      {"role": "assistant", "stop_reason": "length", "model": "m-2", "provider": "p-2",
       "usage": {"input": 5, "output": 7}, "agent": "writer", "timestamp": 9,
       "content": [{"type": "text", "text": "final"}]}
      """

  Scenario: the entry timestamp never changes; the event is stamped with the update time
    # Prevents: a streamed reply jumping to the end of a time-sorted view as it is updated.
    Given I append an empty assistant message to "s_001"
    And the clock advances by 5000 ms
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "late"}]}
      """
    Then the call delivered "session::on-message-updated" with:
      """
      {"timestamp": 1005000}
      """
    And the result is:
      """
      {"revision": 1, "updated": true}
      """
    And the call delivered events "session::on-message-updated"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"timestamp": 1000000, "revision": 1}}
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"updated_at": 1005000}}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"timestamp": 1000000, "revision": 1}}
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"updated_at": 1005000}}
      """

  Scenario: a stale expected_revision loses without writing or firing
    # Prevents: two concurrent streamers clobbering each other's text.
    Given I append an empty assistant message to "s_001"
    And I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "expected_revision": 0, "content": [{"type": "text", "text": "winner"}]}
      """
    And the clock advances by 100 ms
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "expected_revision": 0, "content": [{"type": "text", "text": "loser"}]}
      """
    Then the result is:
      """
      {"updated": false, "revision": 1}
      """
    And the call delivered no events
    And 1 "session::on-message-updated" events were delivered in total
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 1, "message": {"content": [{"type": "text", "text": "winner"}]}}}
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"updated_at": 1000000}}
      """

  Scenario: a matching expected_revision updates normally
    # Prevents: compare-and-set refusing the very revision it was told to expect.
    Given I append an empty assistant message to "s_001"
    And I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "one"}]}
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "expected_revision": 1, "content": [{"type": "text", "text": "two"}]}
      """
    Then the result is:
      """
      {"updated": true, "revision": 2}
      """
    And the call delivered "session::on-message-updated" with:
      """
      {"revision": 2}
      """
    And the call delivered events "session::on-message-updated"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 2, "message": {"content": [{"type": "text", "text": "two"}]}}}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 2, "message": {"content": [{"type": "text", "text": "two"}]}}}
      """

  Scenario: a revision mismatch is reported before the details are validated
    # Prevents: a losing streamer getting an error instead of the current revision it needs to retry.
    Given I append user messages "hi" to "s_001"
    And I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "hi!"}]}
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "expected_revision": 0, "details": {"x": 1},
       "content": [{"type": "text", "text": "nope"}]}
      """
    Then the result is:
      """
      {"updated": false, "revision": 1}
      """
    And the call delivered no events
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 1, "message": {"content": [{"type": "text", "text": "hi!"}]}}}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 1, "message": {"content": [{"type": "text", "text": "hi!"}]}}}
      """

  Scenario: details are replaced on function results and custom-role messages
    # Prevents: pruning a tool result leaving its old (large) details behind, or refusing details where they belong.
    Given these calls succeed:
      """
      [["session::append", {"session_id": "s_001", "message": {"role": "function_result", "function_call_id": "c1",
         "function_id": "shell::run", "content": [{"type": "text", "text": "huge output"}], "details": {"code": 0, "bytes": 99999}, "timestamp": 1}}],
       ["session::append", {"session_id": "s_001", "message": {"role": "custom", "custom_type": "notice",
         "content": [{"type": "text", "text": "n"}], "timestamp": 2}}]]
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "[pruned]"}], "details": {"compacted_at": 1000123}}
      """
    Then the result is:
      """
      {"updated": true, "revision": 1}
      """
    And the call delivered "session::on-message-updated" with:
      """
      {"message": {"details": {"compacted_at": 1000123}, "content": [{"type": "text", "text": "[pruned]"}]}}
      """
    And the call delivered events "session::on-message-updated"
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002", "content": [{"type": "text", "text": "n2"}], "details": {"seen": true}}
      """
    Then the result is:
      """
      {"updated": true, "revision": 1}
      """
    And the call delivered events "session::on-message-updated"
    When the store restarts
    And I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"messages": [
        {"entry_id": "e_001", "message": {"role": "function_result", "function_call_id": "c1", "function_id": "shell::run",
          "content": [{"type": "text", "text": "[pruned]"}], "details": {"compacted_at": 1000123}, "is_error": false, "timestamp": 1}},
        {"entry_id": "e_002", "message": {"role": "custom", "custom_type": "notice",
          "content": [{"type": "text", "text": "n2"}], "details": {"seen": true}, "timestamp": 2}}]}
      """

  Scenario Outline: details on a <role> message are refused and nothing is written
    # Prevents: user or assistant messages growing a details field no client knows how to render.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "message": <message>}
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "changed"}], "details": {"x": 1}}
      """
    Then the call fails with "session/details_not_supported"
    And the call delivered no events
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 0, "message": {"content": [{"type": "text", "text": "orig"}], "details": "<absent>"}}}
      """

    Examples:
      | role      | message |
      | user      | {"role": "user", "content": [{"type": "text", "text": "orig"}], "timestamp": 1} |
      | assistant | {"role": "assistant", "content": [{"type": "text", "text": "orig"}], "stop_reason": "end", "model": "m", "provider": "p", "timestamp": 1} |

  Scenario: null details count as absent
    # Prevents: clients that always send the key (as null) being refused on user messages.
    Given I append user messages "orig" to "s_001"
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "edited"}], "details": null}
      """
    Then the result is:
      """
      {"updated": true, "revision": 1}
      """
    And the call delivered events "session::on-message-updated"
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"message": {"content": [{"type": "text", "text": "edited"}], "details": "<absent>"}}}
      """
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"message": {"content": [{"type": "text", "text": "edited"}], "details": "<absent>"}}}
      """

  Scenario: usage is replaced on assistant messages
    # Prevents: final token accounting from a streamed reply being dropped or merged with the partial numbers.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "message": {"role": "assistant", "content": [], "stop_reason": "end", "model": "m", "provider": "p",
        "usage": {"input": 1, "reasoning": 4}, "timestamp": 1}}
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "done"}],
       "usage": {"input": 10, "output": 20, "cost_usd": 0.5}}
      """
    Then the result is:
      """
      {"updated": true, "revision": 1}
      """
    And the call delivered "session::on-message-updated" with:
      """
      {"message": {"usage": {"input": 10, "output": 20, "cost_usd": 0.5}}}
      """
    And the call delivered events "session::on-message-updated"
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result at "entry.message.usage" is:
      """
      {"input": 10, "output": 20, "cost_usd": 0.5}
      """

  Scenario Outline: usage on a <role> message is refused as the wrong kind
    # Prevents: token accounting attached to messages no provider produced.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "message": <message>}
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "changed"}], "usage": {"input": 1}}
      """
    Then the call fails with "session/invalid_entry_kind"
    And the call delivered no events
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 0, "message": {"content": [{"type": "text", "text": "orig"}], "usage": "<absent>"}}}
      """

    Examples:
      | role            | message |
      | user            | {"role": "user", "content": [{"type": "text", "text": "orig"}], "timestamp": 1} |
      | function_result | {"role": "function_result", "function_call_id": "c", "function_id": "f::g", "content": [{"type": "text", "text": "orig"}], "timestamp": 1} |
      | custom          | {"role": "custom", "custom_type": "k", "content": [{"type": "text", "text": "orig"}], "timestamp": 1} |

  Scenario: a custom entry cannot be updated
    # Prevents: bookkeeping records being rewritten as if they were messages (and gaining a message body).
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "custom": {"custom_type": "compaction", "data": {"n": 1}}}
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "x"}]}
      """
    Then the call fails with "session/invalid_entry_kind"
    And the error message contains "custom entry"
    And the call delivered no events
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result is:
      """
      {"entry": {"kind": "custom", "id": "e_001", "parent_id": null, "timestamp": 1000000, "revision": 0,
                 "custom_type": "compaction", "data": {"n": 1}}}
      """

  Scenario: unknown entries and sessions are refused
    # Prevents: an update to a typo'd id silently creating or touching something.
    Given I append user messages "hi" to "s_001"
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_404", "content": []}
      """
    Then the call fails with "session/entry_not_found"
    And the call delivered no events
    When I call "session::update-message" with:
      """
      {"session_id": "s_404", "entry_id": "e_001", "content": []}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"revision": 0}}
      """

  Scenario: the request origin is echoed on the event only; the stored origin stays
    # Prevents: a streamer's origin overwriting the provenance recorded when the entry was appended.
    Given I call "session::append" with:
      """
      {"session_id": "s_001", "origin": {"turn_id": "t_1"},
       "message": {"role": "assistant", "content": [], "stop_reason": "end", "model": "m", "provider": "p", "timestamp": 1}}
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "origin": {"stream": "s-7"}, "content": [{"type": "text", "text": "x"}]}
      """
    Then the call delivered "session::on-message-updated" with:
      """
      {"origin": {"stream": "s-7"}}
      """
    And the result is:
      """
      {"revision": 1, "updated": true}
      """
    And the call delivered events "session::on-message-updated"
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "content": [{"type": "text", "text": "y"}]}
      """
    Then the call delivered "session::on-message-updated" with:
      """
      {"origin": "<absent>", "revision": 2}
      """
    And the result is:
      """
      {"revision": 2, "updated": true}
      """
    And the call delivered events "session::on-message-updated"
    When the store restarts
    And I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"entry": {"origin": {"turn_id": "t_1"}, "revision": 2}}
      """

  Scenario: entries off the active path can be updated and the count never moves
    # Prevents: updates being limited to the active branch, or counted as new messages.
    Given I append user messages "one, two" to "s_001"
    And I call "session::set-active-leaf" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    When I call "session::update-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_002", "content": [{"type": "text", "text": "two (edited)"}]}
      """
    Then the result is:
      """
      {"updated": true, "revision": 1}
      """
    And the call delivered events "session::on-message-updated"
    And reading the active path of "s_001" gives "e_001"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_002"}
      """
    Then the result at "messages.1.message.content" is:
      """
      [{"type": "text", "text": "two (edited)"}]
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 2}}
      """
    When the store restarts
    Then reading the active path of "s_001" gives "e_001"
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "from_entry_id": "e_002"}
      """
    Then the result at "messages.1.message.content" is:
      """
      [{"type": "text", "text": "two (edited)"}]
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 2}}
      """
