@pure
Feature: Attachments: the original bytes a message was sent with

  session::put-attachment stores decoded bytes beside the session and hands
  back their metadata plus a ready `file` block; get/list/delete-attachment
  read and remove them. Attachment calls never fire events and never touch
  message_count or updated_at. On disk an attachment is
  attachments/<encoded session id>/<id>.bin plus <id>.json, the metadata
  renamed into place last, so a listed attachment always has its bytes.

  Background:
    Given a fresh session store
    And these calls succeed:
      """
      [["session::create", {"title": "files", "metadata": {"owner": "u_1"}}]]
      """

  Scenario: an upload reads back byte-for-byte, with its metadata and its files on disk
    # Prevents: the original document being lost, mangled or re-hashed between upload and read-back.
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}
      """
    Then the result is:
      """
      {"attachment": {"attachment_id": "a_001", "session_id": "s_001", "name": "hello.txt", "mime": "text/plain",
                      "size": 5, "sha256": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
                      "created_at": 1000000},
       "block": {"type": "file", "attachment_id": "a_001", "name": "hello.txt", "mime": "text/plain", "size": 5}}
      """
    And the call delivered no events
    When I remember "attachment" as "hello"
    Then the attachment folder of session "s_001" holds the files:
      """
      ["a_001.bin", "a_001.json"]
      """
    And the attachment file "a_001.bin" of session "s_001" holds the base64 bytes "aGVsbG8="
    And the attachment file "a_001.json" of session "s_001" holds the JSON:
      """
      "${hello}"
      """
    And the data dir holds the files:
      """
      ["s_001.jsonl"]
      """
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the result is:
      """
      {"attachment": "${hello}", "data": "aGVsbG8="}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001", "include_data": true}
      """
    Then the result is:
      """
      {"attachment": "${hello}", "data": "aGVsbG8="}
      """
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"attachments": ["${hello}"]}
      """
    And the call delivered no events

  Scenario: uploading is event-silent and leaves the session record alone
    # Prevents: an upload re-ordering session::list or waking observers before the message that carries it exists.
    Given the clock advances by 300 ms
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}
      """
    Then the call succeeds
    And the call delivered no events
    And the file of session "s_001" has 1 lines
    And the result is:
      """
      {"attachment": {"attachment_id": "a_001", "created_at": 1000300, "mime": "text/plain", "name": "hello.txt", "session_id": "s_001", "sha256": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", "size": 5}, "block": {"attachment_id": "a_001", "mime": "text/plain", "name": "hello.txt", "size": 5, "type": "file"}}
      """
    When I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 0, "updated_at": 1000000, "draft_attachments": "<absent>"}}
      """
    When the store restarts
    And I call "session::get" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"meta": {"message_count": 0, "updated_at": 1000000}}
      """
    And 0 "session::on-meta-updated" events were delivered in total
    And 0 "session::on-message-added" events were delivered in total

  Scenario: a blank mime is stored as application/octet-stream and name and mime are trimmed
    # Prevents: a browser's empty content type reaching a download as "", or stray spaces splitting one file type in two.
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "  mystery  ", "mime": "   ", "data": "AAECAwQ="}
      """
    Then the result is:
      """
      {"attachment": {"attachment_id": "a_001", "session_id": "s_001", "name": "mystery",
                      "mime": "application/octet-stream", "size": 5,
                      "sha256": "08bb5e5d6eaac1049ede0893d30ed022b1a4d9b5b48db414871f51c9cb35283d",
                      "created_at": 1000000},
       "block": {"type": "file", "attachment_id": "a_001", "name": "mystery", "mime": "application/octet-stream",
                 "size": 5}}
      """
    And the call delivered no events
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "notes.txt", "mime": " text/plain ", "data": ""}
      """
    Then the result contains:
      """
      {"attachment": {"attachment_id": "a_002", "mime": "text/plain", "size": 0,
                      "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
       "block": {"mime": "text/plain", "size": 0}}
      """
    And the attachment file "a_002.bin" of session "s_001" is empty
    And the call delivered no events
    When the store restarts
    And I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"name": "mystery", "mime": "application/octet-stream"}, {"name": "notes.txt", "mime": "text/plain"}]}
      """

  Scenario Outline: data that is not standard padded base64 is refused before anything is written
    # Prevents: half-valid uploads landing as unreadable blobs, or a refused upload consuming an id or leaving a folder.
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "bad.bin", "mime": "application/octet-stream", "data": "<data>"}
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "data"
    And the call delivered no events
    And the attachments root holds the folders:
      """
      []
      """
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "good.txt", "mime": "text/plain", "data": "aGVsbG8="}
      """
    Then the result contains:
      """
      {"attachment": {"attachment_id": "a_001"}}
      """
    And the call delivered no events
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_001", "name": "good.txt"}]}
      """
    When the store restarts
    And I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_001", "name": "good.txt"}]}
      """

    Examples:
      | data             |
      | not base64!!     |
      | aGVsbG8          |
      | aGVs\\nbG8=      |
      | aGVsbG8=aGVsbG8= |
      | aGVsbG9=         |
      | aGVsbA=A         |
      | a===             |
      | ====             |
      | aé==             |
      | aGVs bG8=        |
      | aGVsbG8-         |

  Scenario: a blank name is refused
    # Prevents: nameless files that a chip can never label or a download never name.
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "", "mime": "text/plain", "data": "aGVsbG8="}
      """
    Then the call fails with "session/invalid_request"
    And the error message contains "name"
    And the call delivered no events
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": " \t ", "mime": "text/plain", "data": "aGVsbG8="}
      """
    Then the call fails with "session/invalid_request"
    And the attachments root holds the folders:
      """
      []
      """
    And the call delivered no events
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"attachments": []}
      """

  Scenario: a decoded size above max_attachment_bytes is refused; the limit itself is allowed
    # Prevents: one oversized upload pinning unbounded memory and disk, or an off-by-one refusing a file at the cap.
    Given the store limits are max_attachment_bytes=4
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}
      """
    Then the call fails with "session/attachment_too_large"
    And the error message contains "5 bytes"
    And the error message contains "4 bytes"
    And the call delivered no events
    And the attachments root holds the folders:
      """
      []
      """
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "hell.txt", "mime": "text/plain", "data": "aGVsbA=="}
      """
    Then the result contains:
      """
      {"attachment": {"attachment_id": "a_001", "size": 4,
                      "sha256": "0ebdc3317b75839f643387d783535adc360ca01f33c75f7c1e7373adcd675c0b"}}
      """
    And the call delivered no events
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_001", "size": 4}]}
      """
    When the store restarts
    And I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_001", "size": 4}]}
      """

  Scenario: request checks run before the session lookup: shape, then size, then existence
    # Prevents: the error a client sees for one bad upload depending on whether the session happens to exist.
    Given the store limits are max_attachment_bytes=4
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_404", "name": "bad.bin", "mime": "", "data": "not base64!!"}
      """
    Then the call fails with "session/invalid_request"
    And the call delivered no events
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_404", "name": "big.txt", "mime": "", "data": "aGVsbG8="}
      """
    Then the call fails with "session/attachment_too_large"
    And the call delivered no events
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_404", "name": "ok.txt", "mime": "", "data": "eHl6"}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events
    And the attachments root holds the folders:
      """
      []
      """
    And the data dir holds the files:
      """
      ["s_001.jsonl"]
      """

  Scenario: reads of unknown attachments are null; listing an unknown session is not_found
    # Prevents: readers having to tell "no such session" from "no such attachment" on get, like get-message.
    Given these calls succeed:
      """
      [["session::put-attachment", {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}]]
      """
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_404"}
      """
    Then the result is null
    And the call delivered no events
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_404", "attachment_id": "a_001"}
      """
    Then the result is null
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_404", "attachment_id": "a_001", "include_data": false}
      """
    Then the result is null
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_404"}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events

  Scenario: include_data false is a metadata-only read
    # Prevents: a chip renderer paying for the whole base64 body just to show a name and a size.
    Given these calls succeed:
      """
      [["session::put-attachment", {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}]]
      """
    And I remember "attachment" as "hello"
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001", "include_data": false}
      """
    Then the result is:
      """
      {"attachment": "${hello}", "data": null}
      """
    And the call delivered no events
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001", "include_data": null}
      """
    Then the result is:
      """
      {"attachment": "${hello}", "data": "aGVsbG8="}
      """

  Scenario: list-attachments is oldest first by created_at, then by id
    # Prevents: list order following file names or directory order instead of upload time.
    Given the clock is at 2000000
    And these calls succeed:
      """
      [["session::put-attachment", {"session_id": "s_001", "name": "late.txt", "mime": "text/plain", "data": "eHl6"}]]
      """
    And the clock is at 1500000
    And these calls succeed:
      """
      [["session::put-attachment", {"session_id": "s_001", "name": "early-1.txt", "mime": "text/plain", "data": "eHl6"}],
       ["session::put-attachment", {"session_id": "s_001", "name": "early-2.txt", "mime": "text/plain", "data": "eHl6"}]]
      """
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_002", "name": "early-1.txt", "created_at": 1500000},
                       {"attachment_id": "a_003", "name": "early-2.txt", "created_at": 1500000},
                       {"attachment_id": "a_001", "name": "late.txt", "created_at": 2000000}]}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_002"}, {"attachment_id": "a_003"}, {"attachment_id": "a_001"}]}
      """

  Scenario: deleting an unreferenced attachment removes both files; a second delete says false
    # Prevents: bytes of a chip removed from the composer lingering, or a repeat delete failing a retrying client.
    Given these calls succeed:
      """
      [["session::put-attachment", {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}],
       ["session::put-attachment", {"session_id": "s_001", "name": "keep.txt", "mime": "text/plain", "data": "eHl6"}]]
      """
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
    And the file of session "s_001" has 1 lines
    When I call "session::delete-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the result is:
      """
      {"deleted": false}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the result is null
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_002"}]}
      """
    When I call "session::delete-attachment" with:
      """
      {"session_id": "s_404", "attachment_id": "a_002"}
      """
    Then the call fails with "session/not_found"
    And the call delivered no events
    And the attachments root holds the folders:
      """
      ["s_001"]
      """
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_002"}]}
      """

  Scenario: an attachment any transcript entry references cannot be deleted, even off the active path
    # Prevents: deleting the bytes behind a sent message's file or linked image, leaving a chip that never opens again.
    Given these calls succeed:
      """
      [["session::put-attachment", {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}],
       ["session::put-attachment", {"session_id": "s_001", "name": "mock.png", "mime": "image/png", "data": "eHl6"}],
       ["session::append", {"session_id": "s_001", "message": {"role": "user", "timestamp": 1, "content": [
          {"type": "text", "text": "root"}]}}],
       ["session::append", {"session_id": "s_001", "message": {"role": "user", "timestamp": 2, "content": [
          {"type": "file", "attachment_id": "a_001", "name": "hello.txt", "mime": "text/plain", "size": 5}]}}],
       ["session::append", {"session_id": "s_001", "parent_id": "e_001", "message": {"role": "user", "timestamp": 3,
          "content": [{"type": "image", "mime": "image/png", "data": "eHl6", "attachment_id": "a_002"}]}}]]
      """
    When I call "session::delete-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the call fails with "session/attachment_in_use"
    And the error message contains "e_002"
    And the call delivered no events
    When I call "session::delete-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_002"}
      """
    Then the call fails with "session/attachment_in_use"
    And the error message contains "e_003"
    And the attachment folder of session "s_001" holds the files:
      """
      ["a_001.bin", "a_001.json", "a_002.bin", "a_002.json"]
      """
    And the call delivered no events
    When the store restarts
    And I call "session::delete-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the call fails with "session/attachment_in_use"
    And the call delivered no events
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the result contains:
      """
      {"data": "aGVsbG8="}
      """

  Scenario: fork copies exactly the attachments the copied path references, under the same ids
    # Prevents: a fork rendering dead chips (same ids, no bytes), or dragging every upload into every fork.
    Given these calls succeed:
      """
      [["session::put-attachment", {"session_id": "s_001", "name": "kept.txt", "mime": "text/plain", "data": "aGVsbG8="}],
       ["session::put-attachment", {"session_id": "s_001", "name": "orphan.txt", "mime": "text/plain", "data": "eHl6"}],
       ["session::put-attachment", {"session_id": "s_001", "name": "mock.png", "mime": "image/png", "data": "AAECAwQ="}],
       ["session::append", {"session_id": "s_001", "message": {"role": "user", "timestamp": 1, "content": [
          {"type": "text", "text": "no files yet"}]}}],
       ["session::append", {"session_id": "s_001", "message": {"role": "user", "timestamp": 2, "content": [
          {"type": "file", "attachment_id": "a_001", "name": "kept.txt", "mime": "text/plain", "size": 5},
          {"type": "image", "mime": "image/png", "data": "AAECAwQ=", "attachment_id": "a_003"}]}}]]
      """
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result contains:
      """
      {"session_id": "s_002", "meta": {"forked_from": "s_001", "message_count": 1}}
      """
    And the call delivered events "session::on-created"
    And the attachment folder of session "s_002" does not exist
    When I call "session::fork" with:
      """
      {"session_id": "s_001", "entry_id": "e_002"}
      """
    Then the result contains:
      """
      {"session_id": "s_003", "meta": {"forked_from": "s_001", "message_count": 2}}
      """
    And the call delivered events "session::on-created"
    And the attachment folder of session "s_003" holds the files:
      """
      ["a_001.bin", "a_001.json", "a_003.bin", "a_003.json"]
      """
    When the store restarts
    And I call "session::list-attachments" with:
      """
      {"session_id": "s_003"}
      """
    Then the result is:
      """
      {"attachments": [
        {"attachment_id": "a_001", "session_id": "s_003", "name": "kept.txt", "mime": "text/plain", "size": 5,
         "sha256": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", "created_at": 1000000},
        {"attachment_id": "a_003", "session_id": "s_003", "name": "mock.png", "mime": "image/png", "size": 5,
         "sha256": "08bb5e5d6eaac1049ede0893d30ed022b1a4d9b5b48db414871f51c9cb35283d", "created_at": 1000000}]}
      """
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_003", "attachment_id": "a_003"}
      """
    Then the result contains:
      """
      {"attachment": {"session_id": "s_003"}, "data": "AAECAwQ="}
      """
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "attachments" has 3 items
    When I call "session::delete-attachment" with:
      """
      {"session_id": "s_003", "attachment_id": "a_001"}
      """
    Then the call fails with "session/attachment_in_use"
    And the call delivered no events
    When the store restarts
    And I call "session::get-attachment" with:
      """
      {"session_id": "s_003", "attachment_id": "a_001"}
      """
    Then the result contains:
      """
      {"attachment": {"attachment_id": "a_001", "session_id": "s_003", "name": "kept.txt"}, "data": "aGVsbG8="}
      """
    And the call delivered no events

  Scenario: deleting a session removes its attachments; a recreated id starts empty
    # Prevents: orphaned blobs outliving their session, and a recreated session id inheriting the old owner's files.
    Given these calls succeed:
      """
      [["session::put-attachment", {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}]]
      """
    When I call "session::delete" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"deleted": true}
      """
    And the call delivered events "session::on-deleted"
    And the attachment folder of session "s_001" does not exist
    And the attachments root holds the folders:
      """
      []
      """
    When the store restarts
    And I call "session::ensure" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"created": true}
      """
    And the call delivered events "session::on-created"
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"attachments": []}
      """
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the result is null
    When the store restarts
    And I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"attachments": []}
      """
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the result is null

  Scenario: folders use the encoded session id and an attachment id never names a path outside its folder
    # Prevents: a crafted id reading or deleting another session's files through "../" or a slash in a session id.
    Given these calls succeed:
      """
      [["session::ensure", {"session_id": "team/alpha"}],
       ["session::put-attachment", {"session_id": "team/alpha", "name": "a.txt", "mime": "text/plain", "data": "eHl6"}],
       ["session::put-attachment", {"session_id": "s_001", "name": "secret.txt", "mime": "text/plain", "data": "aGVsbG8="}]]
      """
    Then the attachments root holds the folders:
      """
      ["s_001", "team%2Falpha"]
      """
    And the attachment folder of session "team/alpha" holds the files:
      """
      ["a_001.bin", "a_001.json"]
      """
    When I call "session::get-attachment" with:
      """
      {"session_id": "team/alpha", "attachment_id": "../s_001/a_002"}
      """
    Then the result is null
    When I call "session::delete-attachment" with:
      """
      {"session_id": "team/alpha", "attachment_id": "../s_001/a_002"}
      """
    Then the result is:
      """
      {"deleted": false}
      """
    And the call delivered no events
    And the attachment folder of session "s_001" holds the files:
      """
      ["a_002.bin", "a_002.json"]
      """
    When the store restarts
    And I call "session::list-attachments" with:
      """
      {"session_id": "team/alpha"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_001", "session_id": "team/alpha"}]}
      """

  Scenario: a crash between the bytes and the metadata leaves no listed attachment without bytes
    # Prevents: a listed attachment whose bytes are missing, or a torn temp file read as an attachment after a crash.
    Given a crash left the bytes of attachment "a_009" of session "s_001" without metadata
    And a crash left a half-written bytes file for attachment "a_010" of session "s_001"
    When the store restarts
    And I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"attachments": []}
      """
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_009"}
      """
    Then the result is null
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_009", "include_data": false}
      """
    Then the result is null
    When I call "session::set-draft" with:
      """
      {"session_id": "s_001", "draft": "x", "attachment_ids": ["a_009"]}
      """
    Then the call fails with "session/invalid_request"
    And the call delivered no events
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}
      """
    Then the result contains:
      """
      {"attachment": {"attachment_id": "a_001"}}
      """
    And the attachment file "a_001.bin" of session "s_001" holds the base64 bytes "aGVsbG8="
    And the call delivered no events
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_001"}]}
      """
    And the call delivered no events
    When the store restarts
    And I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result contains:
      """
      {"attachments": [{"attachment_id": "a_001"}]}
      """
    And the call delivered no events

  Scenario: a failed metadata write fails the upload and leaves nothing listed
    # Prevents: an upload reported as failed that later shows up half-stored, or its bytes leaking on disk.
    Given the next attachment metadata write fails
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}
      """
    Then the call fails with "session/storage"
    And the call delivered no events
    And the attachment folder of session "s_001" holds the files:
      """
      []
      """
    When I call "session::list-attachments" with:
      """
      {"session_id": "s_001"}
      """
    Then the result is:
      """
      {"attachments": []}
      """
    When the store restarts
    And I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the result is null
    When I call "session::put-attachment" with:
      """
      {"session_id": "s_001", "name": "hello.txt", "mime": "text/plain", "data": "aGVsbG8="}
      """
    Then the call succeeds
    And the attachment folder of session "s_001" holds the files:
      """
      ["a_002.bin", "a_002.json"]
      """
    And the result is:
      """
      {"attachment": {"attachment_id": "a_002", "created_at": 1000000, "mime": "text/plain", "name": "hello.txt", "session_id": "s_001", "sha256": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", "size": 5}, "block": {"attachment_id": "a_002", "mime": "text/plain", "name": "hello.txt", "size": 5, "type": "file"}}
      """
    And the call delivered no events

  Scenario: include_image_data false sends linked images as references on all four transcript reads
    # Prevents: a picture-heavy transcript read dragging every image's bytes, or an unlinked image losing its only copy.
    Given these calls succeed:
      """
      [["session::put-attachment", {"session_id": "s_001", "name": "mock.png", "mime": "image/png", "data": "aGVsbG8="}],
       ["session::append", {"session_id": "s_001", "message": {"role": "user", "timestamp": 1, "content": [
          {"type": "text", "text": "two pictures"},
          {"type": "image", "mime": "image/png", "data": "aGVsbG8=", "attachment_id": "a_001"},
          {"type": "image", "mime": "image/png", "data": "eHl6"}]}}]]
      """
    When I call "session::messages" with:
      """
      {"session_id": "s_001"}
      """
    Then the result at "messages.0.message.content" is:
      """
      [{"type": "text", "text": "two pictures"},
       {"type": "image", "mime": "image/png", "data": "aGVsbG8=", "attachment_id": "a_001"},
       {"type": "image", "mime": "image/png", "data": "eHl6"}]
      """
    When I call "session::messages" with:
      """
      {"session_id": "s_001", "include_image_data": false}
      """
    Then the result at "messages.0.message.content" is:
      """
      [{"type": "text", "text": "two pictures"},
       {"type": "image", "mime": "image/png", "data": "", "attachment_id": "a_001"},
       {"type": "image", "mime": "image/png", "data": "eHl6"}]
      """
    And the call delivered no events
    When I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_001"], "include_image_data": false}
      """
    Then the result at "messages.0.message.content" is:
      """
      [{"type": "text", "text": "two pictures"},
       {"type": "image", "mime": "image/png", "data": "", "attachment_id": "a_001"},
       {"type": "image", "mime": "image/png", "data": "eHl6"}]
      """
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "include_image_data": false}
      """
    Then the result at "messages.0.message.content" is:
      """
      [{"type": "text", "text": "two pictures"},
       {"type": "image", "mime": "image/png", "data": "", "attachment_id": "a_001"},
       {"type": "image", "mime": "image/png", "data": "eHl6"}]
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001", "include_image_data": false}
      """
    Then the result at "entry.message.content" is:
      """
      [{"type": "text", "text": "two pictures"},
       {"type": "image", "mime": "image/png", "data": "", "attachment_id": "a_001"},
       {"type": "image", "mime": "image/png", "data": "eHl6"}]
      """
    And the call delivered no events
    When the store restarts
    And I call "session::messages-range" with:
      """
      {"session_id": "s_001", "entry_ids": ["e_001"]}
      """
    Then the result at "messages.0.message.content.1" is:
      """
      {"type": "image", "mime": "image/png", "data": "aGVsbG8=", "attachment_id": "a_001"}
      """
    When I call "session::messages-tail" with:
      """
      {"session_id": "s_001", "include_image_data": true}
      """
    Then the result at "messages.0.message.content.1.data" is:
      """
      "aGVsbG8="
      """
    When I call "session::get-message" with:
      """
      {"session_id": "s_001", "entry_id": "e_001"}
      """
    Then the result at "entry.message.content.1.data" is:
      """
      "aGVsbG8="
      """
    When I call "session::get-attachment" with:
      """
      {"session_id": "s_001", "attachment_id": "a_001"}
      """
    Then the result contains:
      """
      {"data": "aGVsbG8="}
      """
