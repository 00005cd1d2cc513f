// session-manager viewer: live updates. The pages read fine without this file; it only
// listens to /api/events and swaps in the server-rendered HTML of what changed.
"use strict";
(function () {
  var data = JSON.parse(document.getElementById("viewer-data").textContent);
  var region = document.getElementById("live-region");
  var live = document.getElementById("live");
  if (!region || (data.page !== "list" && data.page !== "session")) { return; }
  var timer = null, busy = false, again = false;

  function openDetails() {
    var ids = [];
    region.querySelectorAll("details[open]").forEach(function (d, i) { ids.push(d.id || ("#" + i)); });
    return ids;
  }
  function reopen(ids) {
    region.querySelectorAll("details").forEach(function (d, i) {
      if (ids.indexOf(d.id || ("#" + i)) >= 0) { d.open = true; }
    });
  }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.pathname + location.search, {headers: {"X-Viewer-Fragment": "1"}, credentials: "same-origin"})
      .then(function (r) {
        if (r.status === 404 && data.page === "session") { gone(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html === null) { return; }
        var keep = openDetails();
        region.innerHTML = html;  // server-rendered and escaped there
        reopen(keep);
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; schedule(); } });
  }
  function schedule() {
    if (timer === null) { timer = setTimeout(function () { timer = null; refresh(); }, 100); }
  }
  function gone() {
    var note = document.createElement("p");
    note.className = "gone";
    note.textContent = "This session was deleted.";
    region.replaceChildren(note);
  }
  // The session page follows every event, not only its session's: a fork made elsewhere gets its link
  // here, and a fork deleted elsewhere loses it.
  var source = new EventSource("/api/events");
  source.onopen = function () { live.textContent = "live"; live.className = "live on"; schedule(); };
  source.onerror = function () { live.textContent = "reconnecting"; live.className = "live"; };
  function linked(id) {
    return Array.prototype.some.call(region.querySelectorAll('a[href^="/sessions/"]'), function (a) {
      try { return decodeURIComponent(a.getAttribute("href").slice(10)) === id; } catch (e) { return false; }
    });
  }
  function touches(name, event) {
    if (data.page !== "session" || event.session_id === data.session_id) { return true; }
    if (name === "session::on-created") { return event.forked_from === data.session_id; }
    return name === "session::on-deleted" && linked(event.session_id);
  }
  ["session::on-created", "session::on-message-added", "session::on-message-updated",
   "session::on-status-changed", "session::on-meta-updated"].forEach(function (name) {
    source.addEventListener(name, function (ev) { if (touches(name, JSON.parse(ev.data))) { schedule(); } });
  });
  source.addEventListener("session::on-deleted", function (ev) {
    var event = JSON.parse(ev.data);
    if (data.page === "session") {
      if (event.session_id === data.session_id) {
        gone();
      } else if (touches("session::on-deleted", event)) {
        schedule();
      }
      return;
    }
    region.querySelectorAll("tr[data-session-id]").forEach(function (row) {
      if (row.getAttribute("data-session-id") === event.session_id) { row.remove(); }
    });
    schedule();
  });
})();
