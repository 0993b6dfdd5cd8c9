// The console's live updates: the page is rendered on the server and
// readable as it is; this script refreshes its parts marked "refresh"
// (by id) from a fresh copy of the page, when events of what it shows
// arrive on the node's event stream (/ui/events, Server-Sent Events) or,
// for pages without events, every few seconds.
(function () {
  "use strict";
  var body = document.body;
  var mode = body.dataset.live;
  var badge = document.getElementById("live-status");
  if (!mode) { return; }

  function setBadge(text, cls) {
    if (!badge) { return; }
    badge.textContent = text;
    badge.className = "live-status " + (cls || "");
  }

  var inflight = false, again = false, timer = null;
  function refresh() {
    if (inflight) { again = true; return; }
    inflight = true;
    fetch(location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll(".refresh[id]").forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          // Only what changed is swapped: the rest keeps its focus,
          // selection and the element a click is landing on.
          if (fresh && fresh.outerHTML !== el.outerHTML) {
            el.replaceWith(document.importNode(fresh, true));
          }
        });
        var err = doc.getElementById("error"), cur = document.getElementById("error");
        if (cur && !err) { cur.remove(); }
        body.dataset.refreshed = String(Date.now());
        if (mode === "poll") { setBadge("live", "on"); }
      })
      .catch(function () { setBadge("offline", "off"); })
      .finally(function () {
        inflight = false;
        if (again) { again = false; soon(); }
      });
  }
  // soon refreshes once after a burst of events.
  function soon() {
    if (timer) { return; }
    timer = setTimeout(function () { timer = null; refresh(); }, 250);
  }

  if (mode === "poll") {
    setBadge("live", "on");
    setInterval(refresh, 2000);
    return;
  }

  var task = body.dataset.liveTask, workflow = body.dataset.liveWorkflow;
  var pools = (body.dataset.livePools || "").split(",").filter(Boolean);
  var log = document.getElementById("events");
  function relevant(ev) {
    if (task) { return ev.task_id === task; }
    if (workflow) { return ev.workflow === workflow; }
    return true;
  }
  function show(ev) {
    if (!log) { return; }
    var li = document.createElement("li");
    li.textContent = (ev.at || "") + "  " + (ev.status || ev.workflow_status || "") +
      (ev.attempt ? "  attempt " + ev.attempt : "") + (ev.message ? "  " + ev.message : "");
    log.appendChild(li);
  }
  var params = pools.map(function (p) { return "pool=" + encodeURIComponent(p); });
  // A task's page starts with the events of the task that the node
  // still holds; the others with the events from now on.
  if (task) { params.push("task=" + encodeURIComponent(task), "after=1"); }
  if (workflow) { params.push("workflow=" + encodeURIComponent(workflow)); }
  var q = params.join("&");
  if (!window.EventSource) {
    setInterval(refresh, 3000);
    return;
  }
  var es = new EventSource("/ui/events" + (q ? "?" + q : ""));
  es.addEventListener("ready", function () { setBadge("live", "on"); refresh(); });
  es.onmessage = function (m) {
    var ev;
    try { ev = JSON.parse(m.data); } catch (e) { return; }
    if (!relevant(ev)) { return; }
    show(ev);
    soon();
  };
  es.addEventListener("lagged", function () {
    if (log && task) {
      var li = document.createElement("li");
      li.className = "muted";
      li.textContent = "(earlier events are no longer held by this node)";
      log.appendChild(li);
    }
    soon();
  });
  es.addEventListener("failed", function (m) {
    setBadge("stopped", "off");
    try { badge.title = JSON.parse(m.data).error; } catch (e) { /* keep */ }
    es.close();
  });
  es.onerror = function () { setBadge("reconnecting", "off"); };
  // Counts and ages change without events of their own: refresh now and
  // then as well.
  setInterval(refresh, 10000);
})();
