@pure
Feature: session::get reads one session; session::list filters, orders and pages them
  Background:
    Given a fresh session store

  Scenario: get returns the full meta of a known session, including a parked draft
    # Prevents: get omitting fields list shows (draft, status_reason) or emitting anything.
    Given these calls succeed:
      """
      [["session::create", {"title": "t", "metadata": {"owner": "u_1"}}],
       ["session::set-status", {"session_id": "s_001", "status": "error", "reason": "quota"}],
       ["session::set-draft", {"session_id": "s_001", "draft": "unsent"}]]
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"meta": {"session_id": "s_001", "title": "t", "description": "", "status": "error",
       "status_reason": "quota", "metadata": {"owner": "u_1"}, "draft": "unsent",
       "created_at": 1000000, "updated_at": 1000000, "message_count": 0}}
      """
    And the call delivered no events

  Scenario: get of an unknown id is null, not an error, and creates nothing
    # Prevents: get raising not_found for unknown ids, or a read leaving an empty file behind.
    When I call "session::get" with:
      """
      {"session_id": "s_404"}
      """
    Then the result is null
    And the call delivered no events
    And the data dir holds the files:
      """
      []
      """

  Scenario: the default order is most recently updated first
    # Prevents: list defaulting to creation order, hiding the session that just had activity.
    Given these calls succeed:
      """
      [["session::create", {}]]
      """
    And the clock advances by 10 ms
    And these calls succeed:
      """
      [["session::create", {}]]
      """
    And the clock advances by 10 ms
    And these calls succeed:
      """
      [["session::append", {"session_id": "s_001",
         "message": {"role": "user", "content": [{"type": "text", "text": "bump"}], "timestamp": 1}}]]
      """
    When I call "session::list" with:
      """
      {}
      """
    Then the listed session ids are "s_001, s_002"
    And the result contains:
      """
      {"sessions": [{"updated_at": 1000020, "message_count": 1}, {"updated_at": 1000010}],
       "next_cursor": "<absent>"}
      """
    And the call delivered no events

  Scenario Outline: created orders mirror each other
    # Prevents: created_desc being the same as created_asc, or ordering by updated_at.
    Given these calls succeed:
      """
      [["session::create", {}]]
      """
    And the clock advances by 10 ms
    And these calls succeed:
      """
      [["session::create", {}]]
      """
    And the clock advances by 10 ms
    And these calls succeed:
      """
      [["session::set-meta", {"session_id": "s_001", "title": "touched later"}]]
      """
    When I call "session::list" with:
      """
      {"order": "<order>"}
      """
    Then the listed session ids are "<ids>"
    And the call delivered no events

    Examples:
      | order        | ids          |
      | created_asc  | s_001, s_002 |
      | created_desc | s_002, s_001 |
      | updated_desc | s_001, s_002 |

  Scenario Outline: equal sort keys break ties by session id, reversed in descending orders
    # Prevents: unstable order under identical timestamps (the basis of gapless paging).
    Given these calls succeed:
      """
      [["session::ensure", {"session_id": "b"}], ["session::ensure", {"session_id": "c"}],
       ["session::ensure", {"session_id": "a"}]]
      """
    When I call "session::list" with:
      """
      {"order": "<order>"}
      """
    Then the listed session ids are "<ids>"

    Examples:
      | order        | ids     |
      | created_asc  | a, b, c |
      | created_desc | c, b, a |
      | updated_desc | c, b, a |

  Scenario: the status filter keeps only sessions with exactly that status
    # Prevents: status filter ignored, or matching on status_reason / previous status.
    Given these calls succeed:
      """
      [["session::create", {}], ["session::create", {}], ["session::create", {}],
       ["session::set-status", {"session_id": "s_002", "status": "working"}],
       ["session::set-status", {"session_id": "s_003", "status": "done", "reason": "working"}]]
      """
    When I call "session::list" with:
      """
      {"status": "working", "order": "created_asc"}
      """
    Then the listed session ids are "s_002"
    When I call "session::list" with:
      """
      {"status": "idle", "order": "created_asc"}
      """
    Then the listed session ids are "s_001"
    When I call "session::list" with:
      """
      {"status": "error"}
      """
    Then the result is:
      """
      {"sessions": []}
      """

  Scenario: the metadata filter is subset equality on top-level keys
    # Prevents: metadata filter matching on any key, on partial values, or matching sessions without metadata.
    Given these calls succeed:
      """
      [["session::create", {"metadata": {"owner": "u_1", "channel": "web"}}],
       ["session::create", {"metadata": {"owner": "u_1", "channel": "tg"}}],
       ["session::create", {"metadata": {"owner": "u_2", "channel": "web"}}],
       ["session::create", {}]]
      """
    When I call "session::list" with:
      """
      {"metadata": {"owner": "u_1"}, "order": "created_asc"}
      """
    Then the listed session ids are "s_001, s_002"
    When I call "session::list" with:
      """
      {"metadata": {"owner": "u_1", "channel": "tg"}, "order": "created_asc"}
      """
    Then the listed session ids are "s_002"
    When I call "session::list" with:
      """
      {"metadata": {"owner": "u_3"}}
      """
    Then the listed sessions are none
    When I call "session::list" with:
      """
      {"metadata": {}, "order": "created_asc"}
      """
    Then the listed session ids are "s_001, s_002, s_003, s_004"
    And the call delivered no events

  Scenario: nested metadata values must be deep-equal, with JSON types respected
    # Prevents: nested values compared as partial subsets, or true matching 1.
    Given these calls succeed:
      """
      [["session::create", {"metadata": {"org": {"id": 7, "tags": ["a", "b"]}, "flag": true}}],
       ["session::create", {"metadata": {"org": {"id": 7, "tags": ["a"]}, "flag": 1}}]]
      """
    When I call "session::list" with:
      """
      {"metadata": {"org": {"id": 7, "tags": ["a", "b"]}}}
      """
    Then the listed session ids are "s_001"
    When I call "session::list" with:
      """
      {"metadata": {"org": {"id": 7}}}
      """
    Then the listed sessions are none
    When I call "session::list" with:
      """
      {"metadata": {"flag": true}}
      """
    Then the listed session ids are "s_001"
    When I call "session::list" with:
      """
      {"metadata": {"flag": 1}}
      """
    Then the listed session ids are "s_002"

  Scenario: paging is gapless when every session has the same timestamp
    # Prevents: skipped or repeated sessions across pages when sort keys tie.
    Given these calls succeed:
      """
      [["session::create", {}], ["session::create", {}], ["session::create", {}],
       ["session::create", {}], ["session::create", {}]]
      """
    When I call "session::list" with:
      """
      {"limit": 2, "order": "created_asc"}
      """
    Then the listed session ids are "s_001, s_002"
    And the result at "next_cursor" is:
      """
      "eyJvIjoiY3JlYXRlZF9hc2MiLCJrIjoxMDAwMDAwLCJpZCI6InNfMDAyIn0="
      """
    When I remember "next_cursor" as "page2"
    When I call "session::list" with:
      """
      {"limit": 2, "order": "created_asc", "cursor": "${page2}"}
      """
    Then the listed session ids are "s_003, s_004"
    When I remember "next_cursor" as "page3"
    And I call "session::list" with:
      """
      {"limit": 2, "order": "created_asc", "cursor": "${page3}"}
      """
    Then the listed session ids are "s_005"
    And the result has no "next_cursor"
    And the call delivered no events

  Scenario: descending pages under ties continue with the next lower id
    # Prevents: the default order's cursor resuming in the wrong direction for equal updated_at.
    Given these calls succeed:
      """
      [["session::create", {}], ["session::create", {}], ["session::create", {}]]
      """
    When I call "session::list" with:
      """
      {"limit": 2}
      """
    Then the listed session ids are "s_003, s_002"
    When I remember "next_cursor" as "next"
    And I call "session::list" with:
      """
      {"limit": 2, "cursor": "${next}"}
      """
    Then the listed session ids are "s_001"
    And the result has no "next_cursor"

  Scenario: a cursor resumes after its position even if that session is gone, and filters apply before paging
    # Prevents: a cursor failing or restarting when its anchor session was deleted; filters applied after slicing.
    Given these calls succeed:
      """
      [["session::create", {"metadata": {"k": 1}}], ["session::create", {}],
       ["session::create", {"metadata": {"k": 1}}], ["session::create", {"metadata": {"k": 1}}],
       ["session::create", {"metadata": {"k": 1}}]]
      """
    When I call "session::list" with:
      """
      {"limit": 2, "order": "created_asc", "metadata": {"k": 1}}
      """
    Then the listed session ids are "s_001, s_003"
    When I remember "next_cursor" as "next"
    And I call "session::delete" with:
      """
      {"session_id": "s_003"}
      """
    Then the result is:
      """
      {"deleted": true}
      """
    And the call delivered events "session::on-deleted"
    When I call "session::list" with:
      """
      {"limit": 2, "order": "created_asc", "metadata": {"k": 1}, "cursor": "${next}"}
      """
    Then the listed session ids are "s_004, s_005"
    And the result has no "next_cursor"
    When the store restarts
    And I call "session::list" with:
      """
      {"limit": 2, "order": "created_asc", "metadata": {"k": 1}, "cursor": "${next}"}
      """
    Then the listed session ids are "s_004, s_005"
    And the result has no "next_cursor"

  Scenario Outline: a cursor only works with the order it was issued for
    # Prevents: a cursor silently re-interpreted under another order, yielding gaps or repeats.
    Given these calls succeed:
      """
      [["session::create", {}], ["session::create", {}]]
      """
    And I call "session::list" with:
      """
      {"limit": 1, "order": "created_asc"}
      """
    And I remember "next_cursor" as "asc"
    When I call "session::list" with:
      """
      <request>
      """
    Then the call fails with "session/invalid_cursor"
    And the error message contains "<why>"
    And the call delivered no events

    Examples:
      | request                                                       | why                                                                            |
      | {"limit": 1, "order": "created_desc", "cursor": "${asc}"}     | cursor was issued for order created_asc but the request asks for created_desc |
      | {"limit": 1, "cursor": "${asc}"}                              | cursor was issued for order created_asc but the request asks for updated_desc |

  Scenario Outline: unreadable cursors are invalid_cursor
    # Prevents: a corrupt cursor crashing the call or silently listing from the start.
    Given these calls succeed:
      """
      [["session::create", {}]]
      """
    When I call "session::list" with:
      """
      {"cursor": "<cursor>"}
      """
    Then the call fails with "session/invalid_cursor"
    And the error message contains "<why>"
    And the call delivered no events

    Examples:
      | cursor           | why                          |
      | !!garbage!!      | cursor is not valid base64   |
      | bm90IGpzb24=     | cursor payload is malformed  |
      | eyJpZCI6InNfMDAxIn0= | cursor payload is malformed |

  Scenario: limit 0 still returns one item
    # Prevents: limit 0 returning an empty page with a cursor, which would loop a pager forever.
    Given these calls succeed:
      """
      [["session::create", {}], ["session::create", {}]]
      """
    When I call "session::list" with:
      """
      {"limit": 0, "order": "created_asc"}
      """
    Then the listed session ids are "s_001"
    And the result contains:
      """
      {"next_cursor": "<any>"}
      """

  Scenario: the configured default applies when limit is omitted and large limits clamp to the max
    # Prevents: the default/max list limits being ignored (unbounded pages).
    Given the store limits are default_list_limit=2,max_list_limit=3
    And these calls succeed:
      """
      [["session::create", {}], ["session::create", {}], ["session::create", {}],
       ["session::create", {}], ["session::create", {}]]
      """
    When I call "session::list" with:
      """
      {"order": "created_asc"}
      """
    Then the listed session ids are "s_001, s_002"
    And the result contains:
      """
      {"next_cursor": "<any>"}
      """
    When I call "session::list" with:
      """
      {"order": "created_asc", "limit": 10000}
      """
    Then the listed session ids are "s_001, s_002, s_003"
    And the result contains:
      """
      {"next_cursor": "<any>"}
      """

  Scenario: listed metas carry the parked draft
    # Prevents: a chat list unable to show "draft" markers without a get per session.
    Given these calls succeed:
      """
      [["session::create", {}], ["session::create", {}],
       ["session::set-draft", {"session_id": "s_002", "draft": "to be continued"}]]
      """
    When I call "session::list" with:
      """
      {"order": "created_asc"}
      """
    Then the result contains:
      """
      {"sessions": [{"session_id": "s_001", "draft": "<absent>"},
                    {"session_id": "s_002", "draft": "to be continued"}]}
      """
