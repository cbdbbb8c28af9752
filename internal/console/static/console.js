// Live updates for the console. Each page listens to the server's event
// stream; on any event it fetches the current page again and swaps the
// contents of <main>, keeping focus, what the user is typing, the edit
// forms the user opened and the one-line messages. When the stream is
// refused (404 on a server without it, 401) or drops, the page polls
// instead until it is back.
(function () {
  "use strict";
  var pending = null;
  var pollTimer = null;
  var POLL_MS = 5000;

  function schedule() {
    if (pending) clearTimeout(pending);
    pending = setTimeout(function () { pending = null; refresh(); }, 250);
  }

  // controls returns the form controls in root keyed by id, or by form
  // action and name.
  function controls(root) {
    var out = {};
    root.querySelectorAll("input, select, textarea").forEach(function (el) {
      var key = el.id || ((el.form && el.form.getAttribute("action")) || "") + "#" + el.name;
      if (key && el.type !== "hidden") out[key] = el;
    });
    return out;
  }

  function edited(el) {
    if (el.type === "checkbox" || el.type === "radio") return el.checked !== el.defaultChecked;
    if (el.tagName === "SELECT") {
      return Array.prototype.some.call(el.options, function (o) { return o.selected !== o.defaultSelected; });
    }
    return el.value !== el.defaultValue;
  }

  function refresh() {
    var main = document.querySelector("main");
    // An editor holding the answer to a post (a refused policy) keeps it:
    // the page at its address would be another.
    if (!main || main.querySelector("[data-no-refresh]")) return;
    fetch(location.href, { credentials: "same-origin", headers: { "X-Console-Refresh": "1" } })
      .then(function (res) {
        if (res.redirected && /\/sign-in/.test(res.url)) { location.href = res.url; return null; }
        if (!res.ok) return null;
        return res.text();
      })
      .then(function (html) {
        if (html === null || html === undefined) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var next = doc.querySelector("main");
        if (!next) return;
        var active = document.activeElement;
        var activeKey = null, selStart = null, selEnd = null;
        var old = controls(main);
        for (var k in old) {
          if (old[k] === active) activeKey = k;
        }
        if (activeKey && typeof active.selectionStart === "number") {
          try { selStart = active.selectionStart; selEnd = active.selectionEnd; } catch (e) { /* not a text input */ }
        }
        // Messages in the old page stay unless the new one brings its own.
        main.querySelectorAll("[data-keep]").forEach(function (keep) {
          var twin = keep.id && next.querySelector("#" + CSS.escape(keep.id));
          if (twin && twin.innerHTML.trim() === "") twin.innerHTML = keep.innerHTML;
        });
        // An edit form the user opened stays open.
        var open = [];
        main.querySelectorAll("details[open][id]").forEach(function (d) { open.push(d.id); });
        main.innerHTML = next.innerHTML;
        open.forEach(function (id) {
          var d = document.getElementById(id);
          if (d) d.open = true;
        });
        var fresh = controls(main);
        for (var key in old) {
          var was = old[key], now = fresh[key];
          if (!now || !edited(was) && key !== activeKey) continue;
          if (was.type === "checkbox" || was.type === "radio") now.checked = was.checked;
          else if (was.tagName === "SELECT") {
            Array.prototype.forEach.call(was.options, function (o, i) { if (now.options[i]) now.options[i].selected = o.selected; });
          } else now.value = was.value;
        }
        if (activeKey && fresh[activeKey]) {
          fresh[activeKey].focus();
          if (selStart !== null) {
            try { fresh[activeKey].setSelectionRange(selStart, selEnd); } catch (e) { /* not a text input */ }
          }
        }
        document.dispatchEvent(new CustomEvent("console:refreshed"));
      })
      .catch(function () { /* the next event or poll tries again */ });
  }

  function poll() {
    if (pollTimer) return;
    pollTimer = setInterval(function () { if (!document.hidden) refresh(); }, POLL_MS);
  }

  function listen() {
    if (!window.EventSource) { poll(); return; }
    var es;
    try { es = new EventSource("/v1/events/stream"); } catch (e) { poll(); return; }
    var types = ["node.joined", "node.ready", "node.unreachable", "node.revoked",
      "reservation.placed", "reservation.bound", "reservation.released", "reservation.expired",
      "policy.changed", "usage.closed"];
    types.forEach(function (t) { es.addEventListener(t, schedule); });
    es.onmessage = schedule;
    es.addEventListener("resync", function () { location.reload(); });
    // The token was revoked or expired while the page was open.
    es.addEventListener("unauthorized", function () { location.href = "/sign-in?why=expired"; });
    es.onopen = function () {
      if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
      // The stream starts now; what changed between rendering the page and
      // now would otherwise be missed.
      schedule();
    };
    es.onerror = function () {
      // A refused stream (404, 401) closes for good; a dropped one retries by
      // itself. Either way, poll until it is back.
      poll();
    };
  }

  window.addEventListener("load", listen);
})();

// Copy buttons copy the text of the element their data-copy names.
document.addEventListener("click", function (ev) {
  var btn = ev.target.closest && ev.target.closest("[data-copy]");
  if (!btn) return;
  var src = document.getElementById(btn.getAttribute("data-copy"));
  if (!src || !navigator.clipboard) return;
  navigator.clipboard.writeText(src.textContent).then(function () { btn.textContent = "Copied"; });
});

// A policy the API refused: select its first offending line in the editor,
// so the highlight is where the user types, and scroll it into view.
window.addEventListener("load", function () {
  var ta = document.querySelector("textarea[data-problem-line]");
  if (!ta) return;
  var n = parseInt(ta.getAttribute("data-problem-line"), 10);
  if (!(n > 0)) return;
  var lines = ta.value.split("\n"), start = 0;
  for (var i = 0; i < n - 1 && i < lines.length; i++) start += lines[i].length + 1;
  var end = start + (lines[n - 1] || "").length;
  ta.focus();
  ta.setSelectionRange(start, end);
  var lh = parseFloat(getComputedStyle(ta).lineHeight) || 20;
  ta.scrollTop = Math.max(0, (n - 3) * lh);
});
