// Reloads the charts of the page every 10 s; the page works without it.
(function () {
  var box = document.getElementById("charts");
  if (!box || !window.fetch) return;
  setInterval(function () {
    fetch(box.getAttribute("data-src"), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) box.innerHTML = html; })
      .catch(function () {});
  }, 10000);
})();
