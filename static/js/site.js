/* Behaviour shared by every page. Progressive enhancement only: each page works without it. */
(function () {
  "use strict";

  // The activation socket (htmx ws extension) tells pages whether to fall back to polling.
  window.smLive = false;
  function setLive(live) {
    window.smLive = live;
    var badge = document.getElementById("live-state");
    if (badge) {
      badge.dataset.state = live ? "on" : "off";
      badge.textContent = live ? "live" : "polling";
    }
  }
  document.addEventListener("htmx:wsOpen", function () { setLive(true); });
  document.addEventListener("htmx:wsClose", function () { setLive(false); });
  document.addEventListener("htmx:wsError", function () { setLive(false); });

  // Out-of-band swaps only for elements this page has. The activation push (socket and polling fallback) sends
  // every live figure of every memory that moved; a page holds a few of them (the list its bars, a memory's
  // page its number, stored value and Accessed), and htmx logs htmx:oobErrorNoTarget for each of the rest.
  // Enabled for the whole page by hx-ext="present-only" on <body>.
  if (window.htmx) {
    window.htmx.defineExtension("present-only", {
      transformResponse: function (text) {
        if (text.indexOf("hx-swap-oob") === -1) { return text; }
        var template = document.createElement("template");
        template.innerHTML = text;
        var dropped = false;
        Array.prototype.slice.call(template.content.children).forEach(function (el) {
          var oob = el.getAttribute("hx-swap-oob");
          // Only a plain by-id swap ("true" or a swap style) names its target by the element's own id.
          if (oob !== null && oob.indexOf(":") === -1 && el.id && !document.getElementById(el.id)) {
            el.remove();
            dropped = true;
          }
        });
        return dropped ? template.innerHTML : text;
      }
    });
  }

  // Workspace switcher: go as soon as a workspace is chosen (the noscript button does it without JS).
  document.addEventListener("change", function (event) {
    var form = event.target.closest && event.target.closest("form[data-autosubmit]");
    if (form && event.target.value) { form.submit(); }
  });

  // Copy buttons: data-copy="#selector" copies that element's text.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (button) {
      var source = document.querySelector(button.getAttribute("data-copy"));
      if (!source) { return; }
      var text = source.innerText.trim();
      var done = function () {
        button.textContent = "Copied";
        setTimeout(function () { button.textContent = "Copy"; }, 2000);
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done);
      } else {
        var range = document.createRange();
        range.selectNodeContents(source);
        var selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        try { document.execCommand("copy"); done(); } catch (e) { /* the text stays selected for Ctrl+C */ }
      }
      return;
    }
    // data-dismiss="id": empty that swap target instead of following the link (htmx dialogs).
    var dismiss = event.target.closest && event.target.closest("[data-dismiss]");
    if (dismiss) {
      var target = document.getElementById(dismiss.getAttribute("data-dismiss"));
      if (target) {
        event.preventDefault();
        target.innerHTML = "";
        target.className = "";
        var back = document.getElementById("bulk-apply") || document.getElementById("main");
        if (back) { back.focus(); }
      }
    }
  });

  // Escape closes an open dialog.
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") {
      var close = document.querySelector(".dialog [data-dismiss]");
      if (close) { close.click(); }
    }
  });
})();
