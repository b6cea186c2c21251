// ledger view, live mode: poll the event count; when ledger run has appended events,
// re-fetch this page and swap its <main> in (no framework, nothing from the network but this server).
(function () {
  "use strict";
  var body = document.body;
  if (!body.dataset.live) { return; }
  var busy = false;
  function swap() {
    return fetch(window.location.href, { cache: "no-store" })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.querySelector("main");
        var old = document.querySelector("main");
        if (fresh && old) { old.replaceWith(fresh); }
        body.dataset.events = doc.body.dataset.events;
        body.dataset.verification = doc.body.dataset.verification;
      });
  }
  function poll() {
    if (busy) { return; }
    busy = true;
    fetch("/api/status", { cache: "no-store" })
      .then(function (r) { return r.json(); })
      .then(function (s) {
        if (String(s.events) !== body.dataset.events ||
            s.verification.state !== body.dataset.verification) { return swap(); }
        return null;
      })
      .catch(function () { /* the server stopped: keep the page as it is */ })
      .then(function () { busy = false; });
  }
  window.setInterval(poll, 1500);
})();
