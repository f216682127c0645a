/* Memory browser: keyboard navigation and selection of the list, the neighbourhood graph. */
(function () {
  "use strict";

  function rows() {
    return Array.prototype.slice.call(document.querySelectorAll("#memory-table tbody tr.mrow"));
  }

  function typing(target) {
    var tag = target && target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  // One row is in the tab order at a time (roving tabindex); j/k and arrows move it.
  function focusRow(index) {
    var all = rows();
    if (!all.length) { return; }
    index = Math.max(0, Math.min(all.length - 1, index));
    all.forEach(function (row, i) { row.tabIndex = i === index ? 0 : -1; });
    all[index].focus();
  }

  function initRows() {
    var all = rows();
    if (all.length && !all.some(function (r) { return r.tabIndex === 0; })) { all[0].tabIndex = 0; }
    updateSelection();
  }

  function updateSelection() {
    var boxes = document.querySelectorAll("#memory-table tbody input[name=ids]");
    var checked = document.querySelectorAll("#memory-table tbody input[name=ids]:checked");
    var count = document.getElementById("selected-count");
    if (count) { count.textContent = checked.length + " selected"; }
    var apply = document.getElementById("bulk-apply");
    if (apply) { apply.disabled = checked.length === 0; }
    var all = document.getElementById("select-all");
    if (all) {
      all.checked = boxes.length > 0 && checked.length === boxes.length;
      all.indeterminate = checked.length > 0 && checked.length < boxes.length;
    }
    Array.prototype.forEach.call(boxes, function (box) {
      var row = box.closest("tr");
      if (row) { row.classList.toggle("selected", box.checked); }
    });
    var action = document.getElementById("bulk-action");
    if (action) {
      document.querySelectorAll(".bulk-value").forEach(function (el) {
        el.hidden = el.getAttribute("data-for") !== action.value;
      });
    }
  }

  document.addEventListener("change", function (event) {
    if (event.target.id === "select-all") {
      document.querySelectorAll("#memory-table tbody input[name=ids]").forEach(function (box) {
        box.checked = event.target.checked;
      });
    }
    if (event.target.name === "ids" || event.target.id === "select-all" || event.target.id === "bulk-action") {
      updateSelection();
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey) { return; }
    if (event.key === "/" && !typing(event.target)) {
      var search = document.getElementById("id_q");
      if (search) { event.preventDefault(); search.focus(); search.select(); }
      return;
    }
    var row = event.target.closest && event.target.closest("#memory-table tbody tr.mrow");
    var all = rows();
    if (!all.length || typing(event.target)) { return; }
    var index = row ? all.indexOf(row) : -1;
    if (event.key === "j" || event.key === "ArrowDown") {
      event.preventDefault();
      focusRow(index + 1);
    } else if (event.key === "k" || event.key === "ArrowUp") {
      if (!row) { return; }
      event.preventDefault();
      focusRow(index - 1);
    } else if (row && event.key === "Enter") {
      var link = row.querySelector("a.open");
      if (link) { event.preventDefault(); link.click(); }
    } else if (row && (event.key === "x" || event.key === " ")) {
      var box = row.querySelector("input[name=ids]");
      if (box) {
        event.preventDefault();
        box.checked = !box.checked;
        updateSelection();
      }
    }
  });

  // -- neighbourhood graph (vendored Cytoscape, fed by the graph.json endpoint) --------------------
  var TYPE_COLOURS = {
    decision: "#7a3e00", semantic: "#0b5cad", episodic: "#5b3c99", fact: "#1f6f43", entity: "#44505c",
    session: "#6b4e16", goal: "#9a1f5c", preference: "#0e6b6b", procedural: "#2d5e0e", anchor: "#a3001b"
  };

  function drawGraph(el) {
    if (el.dataset.drawn || typeof window.cytoscape !== "function") { return; }
    el.dataset.drawn = "loading";
    fetch(el.getAttribute("data-src"), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.json(); })
      .then(function (data) {
        var center = el.getAttribute("data-center");
        var cy = window.cytoscape({
          container: el,
          elements: { nodes: data.nodes, edges: data.edges },
          wheelSensitivity: 0.2,
          style: [
            { selector: "node", style: {
              "background-color": function (n) { return TYPE_COLOURS[n.data("type")] || "#57606a"; },
              "label": "data(label)", "font-size": 8, "color": "#1b1f24", "text-wrap": "ellipsis",
              "text-max-width": 96, "text-valign": "bottom", "text-margin-y": 3, "width": 14, "height": 14,
              "text-background-color": "#fbfcfd", "text-background-opacity": 0.85, "text-background-padding": 1 } },
            { selector: "node[hops = 2]", style: { "label": "", "width": 10, "height": 10 } },
            { selector: "node[hops = 2]:active, node[hops = 2]:selected", style: { "label": "data(label)" } },
            { selector: "node[hops = 0]", style: { "width": 24, "height": 24, "border-width": 3,
              "border-color": "#fb8c00", "font-weight": "bold" } },
            { selector: "node[status = 'archived']", style: { "opacity": 0.5 } },
            { selector: "edge", style: { "width": "mapData(weight, 0, 2, 1, 4)", "line-color": "#8c959f",
              "target-arrow-color": "#8c959f", "target-arrow-shape": "triangle", "curve-style": "bezier",
              "arrow-scale": 0.7 } },
            { selector: "edge[type = 'CONTRADICTS']", style: { "line-color": "#cf222e", "target-arrow-color": "#cf222e" } }
          ],
          // An ego network: the memory in the middle, first-hop neighbours on the inner ring.
          layout: { name: "breadthfirst", roots: "[hops = 0]", circle: true, spacingFactor: 1.15,
            avoidOverlap: true, padding: 12, animate: false }
        });
        cy.on("tap", "node", function (evt) {
          var url = evt.target.data("url");
          if (url && evt.target.id() !== center) { window.location.href = url; }
        });
        el.dataset.drawn = "true";
        el.setAttribute("aria-label", el.getAttribute("aria-label") + " (" + data.nodes.length + " memories, " +
          data.edges.length + " edges" + (data.truncated ? ", cut at the limit" : "") + ")");
        el.dataset.nodes = String(data.nodes.length);
      })
      .catch(function () {
        el.dataset.drawn = "failed";
        el.textContent = "The graph could not be loaded; the edge list names the same neighbours.";
      });
  }

  function init(root) {
    initRows();
    (root || document).querySelectorAll("#memory-graph").forEach(drawGraph);
  }

  document.addEventListener("DOMContentLoaded", function () { init(document); });
  document.addEventListener("htmx:load", function (event) { init(event.target); });
})();
