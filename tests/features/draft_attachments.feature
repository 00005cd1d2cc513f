@pure
Feature: Draft attachments: the chips parked with the unsent composer text

  session::set-draft takes attachment_ids beside the text: omitted leaves the
  parked attachments alone, [] clears them, an id the session has not stored
  is session/invalid_request. They read back resolved, as draft_attachments
  on SessionMeta. Like the text, parking is event-silent and keeps
  updated_at; deleting a parked attachment drops it from the draft; a fork
  never inherits the draft.

  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"title": "compose", "metadata": {"owner": "u_1"}}],
       ["session::put-attachment", {"session_id": "s_001", "name": "mock.png", "mime": "image/png", "data": "aGVsbG8="}],
       ["session::put-attachment", {"session_id": "s_001", "name": "notes.txt", "mime": "text/plain", "data": "eHl6"}]]
      """
    And I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001", "include_data": false}
      """
    And I remember "attachment" as "png"
    And I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_002", "include_data": false}
      """
    And I remember "attachment" as "txt"

  Scenario: parked attachments resolve in request order without duplicates and survive a restart
    # Prevents: the composer's chips vanishing on reload while its text survives, or a duplicate chip appearing twice.
    Given the clock advances by 250 ms
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "look at these", "attachment_ids": ["a_002", "a_001", "a_002"]}
      """
    Then the result is:
      """
      {"draft": "look at these", "attachments": ["${txt}", "${png}"]}
      """
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "look at these", "draft_attachments": ["${txt}", "${png}"], "updated_at": 1000000}}
      """
    When the store restarts
    And I call "session::list" with:
      """
      {}
      """
    Then the result contains:
      """
      {"sessions": [{"session_id": "s_001", "draft": "look at these", "draft_attachments": ["${txt}", "${png}"],
                     "updated_at": 1000000}]}
      """
    And the call delivered no events
    And 0 "session::on-meta-updated" events were delivered in total

  Scenario: a text-only save keeps the parked attachments and an empty list clears them
    # Prevents: a keystroke-cadence text save silently dropping the chips, or a cleared composer keeping stale ones.
    Given these calls succeed:
      """
      [["session::set-draft", {"session_id": "s_001", "draft": "first", "attachment_ids": ["a_001"]}]]
      """
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "first draft, still typing"}
      """
    Then the result is:
      """
      {"draft": "first draft, still typing", "attachments": ["${png}"]}
      """
    And the call delivered no events
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "first draft, still typing", "attachment_ids": []}
      """
    Then the result is:
      """
      {"draft": "first draft, still typing", "attachments": []}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "first draft, still typing", "draft_attachments": "<absent>"}}
      """
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": null, "attachment_ids": []}
      """
    Then the result is:
      """
      {"draft": null, "attachments": []}
      """
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "<absent>", "draft_attachments": "<absent>"}}
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "<absent>", "draft_attachments": "<absent>"}}
      """

  Scenario: attachments can be parked without text
    # Prevents: a composer holding only a dropped file losing it because there was no text to save.
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "attachment_ids": ["a_002"]}
      """
    Then the result is:
      """
      {"draft": null, "attachments": ["${txt}"]}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "<absent>", "draft_attachments": ["${txt}"], "updated_at": 1000000}}
      """

  Scenario: an unknown or foreign attachment id is refused and the parked draft is unchanged
    # Prevents: a draft pointing at bytes that were never stored here, a chip that can never be rebuilt.
    Given these calls succeed:
      """
      [["session::set-draft", {"session_id": "s_001", "draft": "keep", "attachment_ids": ["a_001"]}],
       ["session::create", {"title": "other"}],
       ["session::put-attachment", {"session_id": "s_002", "name": "theirs.txt", "mime": "text/plain", "data": "eHl6"}]]
      """
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "changed", "attachment_ids": ["a_001", "a_404"]}
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "a_404"
    And the call delivered no events
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "changed", "attachment_ids": ["a_003"]}
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "a_003"
    And the call delivered no events
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "keep", "draft_attachments": ["${png}"]}}
      """

  Scenario: set-draft with attachment ids on an unknown session is not_found
    # Prevents: parking a draft, or resolving its ids, against a session that does not exist.
    When I call "session::set-draft" with:
      """
      {"session_id": "s_404", "draft": "x", "attachment_ids": ["a_001"]}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events
    And the data dir holds the files:
      """
      ["s_001.jsonl"]
      """

  Scenario: deleting a parked attachment frees its bytes and drops it from the draft
    # Prevents: a stale draft still showing a chip whose bytes are gone.
    Given these calls succeed:
      """
      [["session::set-draft", {"session_id": "s_001", "draft": "x", "attachment_ids": ["a_001", "a_002"]}]]
      """
    And the clock advances by 500 ms
    When I call "session::delete-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the result is:
      """
      {"deleted": true}
      """
    And the call delivered no events
    And the attachment folder of session "s_001" holds the files:
      """
      ["a_002.bin", "a_002.json"]
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "x", "draft_attachments": ["${txt}"], "updated_at": 1000000}}
      """
    When I call "session::delete-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_002"}
      """
    Then the result is:
      """
      {"deleted": true}
      """
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "x", "draft_attachments": "<absent>"}}
      """
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "x"}
      """
    Then the result is:
      """
      {"draft": "x", "attachments": []}
      """
    And the call delivered no events
    And the attachment folder of session "s_001" holds the files:
      """
      []
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "x", "draft_attachments": "<absent>"}}
      """
    And the call delivered no events

  Scenario: a fork never inherits the draft or the attachments only the draft holds
    # Prevents: a fork showing the source's half-composed message, or copying uploads no copied message references.
    Given these calls succeed:
      """
      [["session::set-draft", {"session_id": "s_001", "draft": "unsent", "attachment_ids": ["a_001"]}],
       ["session::append", {"session_id": "s_001", "message": {"role": "user", "timestamp": 1, "content": [
          {"type": "text", "text": "one"},
          {"type": "file", "attachment_id": "a_002", "name": "notes.txt", "mime": "text/plain", "size": 3}]}}]]
      """
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"session_id": "s_002", "meta": {"forked_from": "s_001", "draft": "<absent>", "draft_attachments": "<absent>"}}
      """
    And the call delivered events "session::on-created"
    And the attachment folder of session "s_002" holds the files:
      """
      ["a_002.bin", "a_002.json"]
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_002"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "<absent>", "draft_attachments": "<absent>"}}
      """
    When I call "session::set-draft" with:
      """
      {"session_id": "s_002", "attachment_ids": ["a_001"]}
      """
    Then the call fails with "session/invalid_request"
    And the call delivered no events
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"draft": "unsent", "draft_attachments": ["${png}"]}}
      """
