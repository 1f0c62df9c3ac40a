// sqlease dashboard: re-fetch the page's main part every data-refresh ms
// and swap it in, without a reload. Never while the keyboard focus is
// inside it (nothing is pulled from under the user) or the tab is hidden.
(function () {
  "use strict";
  var main = document.getElementById("main");
  if (!main || !main.dataset.refresh) return;
  var every = parseInt(main.dataset.refresh, 10) || 2000;
  var status = document.getElementById("live-status");
  var busy = false;
  var last = "";
  function say(text, bad) {
    if (!status) return;
    status.textContent = text;
    status.className = bad ? "stale" : "";
  }
  function tick() {
    if (busy || document.hidden) return;
    var a = document.activeElement;
    if (a && a !== main && main.contains(a)) return;
    busy = true;
    var u = new URL(window.location.href);
    u.searchParams.delete("done");
    u.searchParams.set("fragment", "1");
    fetch(u.toString(), { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (res) {
        if (res.redirected && res.url.indexOf("/ui/login") >= 0) {
          window.location.assign(res.url); // the sign-in ended: ask for it again
          throw new Error("signed out");
        }
        if (res.redirected || !res.ok) throw new Error("HTTP " + res.status);
        return res.text();
      })
      .then(function (html) {
        if (html !== last) {
          main.innerHTML = html;
          last = html;
        }
        say("Updated " + new Date().toLocaleTimeString() + "; updates itself every " + every / 1000 + " s.", false);
      })
      .catch(function (err) {
        say("This node does not answer (" + err.message + "): the page is stale. Open another node's dashboard.", true);
      })
      .finally(function () { busy = false; });
  }
  window.setInterval(tick, every);
})();
