// The mesh drawn with cytoscape, shared by the Topology page and the Message page: the
// node and edge styles, the force layout that places new nodes around the others, and a
// fit that does not blow a small mesh up. Load after common.js and cytoscape.min.js.
"use strict";

(function () {
  const STATE_COLORS = { up: "#1f9d55", down: "#d63b3b", leaving: "#c98a06", silent: "#98a2b3" };

  const BASE_STYLE = [
    { selector: "node", style: {
      label: "data(label)", "text-wrap": "wrap", "text-valign": "bottom", "text-margin-y": 6,
      "font-size": 13, "font-weight": 600, color: "#1c2430", width: 46, height: 46,
      "background-color": (node) => STATE_COLORS[node.data("state")] || STATE_COLORS.silent,
      "border-width": 3, "border-color": "#ffffff", "text-background-color": "#fbfcfd",
      "text-background-opacity": 0.85, "text-background-padding": 2,
    } },
    { selector: "node:selected", style: { "border-color": "#2f6fde", "border-width": 5 } },
    { selector: "edge", style: {
      width: "data(width)", "line-color": "#9aa9bf", "curve-style": "bezier", label: "data(label)",
      "text-wrap": "wrap", "font-size": 11.5, color: "#344054", "text-background-color": "#ffffff",
      "text-background-opacity": 0.9, "text-background-padding": 2,
    } },
  ];

  // A graph in ``container`` with the shared styles, then ``style`` (the page's own).
  function create(container, style = []) {
    return window.cytoscape({
      container, minZoom: 0.3, maxZoom: 2.5, boxSelectionEnabled: false, style: [...BASE_STYLE, ...style],
    });
  }

  // The whole mesh in view, not blown up (past ``most``) when it is small.
  function fit(cy, padding = 70, most = 1.2) {
    cy.fit(undefined, padding);
    if (cy.zoom() > most) {
      cy.zoom(most);
      cy.center();
    }
  }

  // Place ``nodes`` with a force layout that leaves the others where they are; ``first``:
  // every node is new (placed at random, then fitted). ``done`` runs once placed.
  function layoutAround(cy, nodes, first, done) {
    const keep = cy.nodes().not(nodes);
    keep.lock();
    cy.layout({
      name: "cose", randomize: first, animate: false, fit: false, idealEdgeLength: () => 220,
      edgeElasticity: () => 100, nodeRepulsion: () => 4000000, gravity: 1,
      stop: () => {
        keep.unlock();
        if (first) fit(cy);
        if (done) done();
      },
    }).run();
  }

  MG.graph = { STATE_COLORS, create, fit, layoutAround };
})();
