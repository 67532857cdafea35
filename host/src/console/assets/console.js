// The console's only script: live updates. Every page works without it.
//
// A runs list (`data-live-runs`) follows one stream for its unfinished rows: a
// `run` event updates the row in place, a `new` event offers the newer runs. A
// run's page (`data-live-run`) follows that run's events and redraws its main
// part from the server, so the page is always what the server would render.
"use strict";

(function () {
  function redraw(then) {
    fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("main");
        var main = document.getElementById("main");
        if (fresh && main) {
          main.innerHTML = fresh.innerHTML;
        }
        if (then) then();
      })
      .catch(function () { /* the next event tries again */ });
  }

  var source = null;

  function followRun(note) {
    var pending = null;
    source = new EventSource(note.getAttribute("data-live-run"));
    note.textContent = "Following this run live.";
    var changed = function () {
      if (pending) return;
      pending = setTimeout(function () {
        pending = null;
        redraw(null);
      }, 150);
    };
    source.addEventListener("checkpoint", changed);
    source.addEventListener("tool_execution", changed);
    source.addEventListener("end", function () {
      source.close();
      source = null;
      redraw(null);
    });
  }

  function followRuns(note) {
    source = new EventSource(note.getAttribute("data-live-runs"));
    source.addEventListener("run", function (e) {
      var run = JSON.parse(e.data);
      var rows = document.querySelectorAll("tr[data-run-id]");
      for (var i = 0; i < rows.length; i++) {
        var row = rows[i];
        if (row.getAttribute("data-run-id") !== run.run_id) continue;
        var badge = row.querySelector(".status .badge");
        if (badge) {
          badge.textContent = run.status;
          badge.setAttribute("data-status", run.status);
          badge.className = "badge " + klass(run.status);
        }
        setText(row, ".state", run.state);
        setText(row, ".steps", String(run.step_count));
        setText(row, ".stop", run.stop_reason || "");
      }
    });
    source.addEventListener("new", function (e) {
      var count = JSON.parse(e.data).count;
      if (count > 0) {
        note.innerHTML = "";
        var link = document.createElement("a");
        link.href = location.href;
        link.textContent = count + (count === 1 ? " newer run" : " newer runs") + ": show";
        link.addEventListener("click", function (ev) {
          ev.preventDefault();
          restart();
        });
        note.appendChild(link);
      }
    });
  }

  function klass(status) {
    if (status === "completed") return "ok";
    if (status === "running" || status === "waiting_approval") return "busy";
    if (status === "needs_human" || status === "stopped") return "warn";
    return "bad";
  }

  function setText(row, selector, text) {
    var cell = row.querySelector(selector);
    if (cell) cell.textContent = text;
  }

  function restart() {
    if (source) {
      source.close();
      source = null;
    }
    redraw(start);
  }

  function start() {
    var run = document.querySelector("[data-live-run]");
    if (run) return followRun(run);
    var runs = document.querySelector("[data-live-runs]");
    if (runs) return followRuns(runs);
  }

  if (window.EventSource && window.fetch) {
    start();
  }
})();
