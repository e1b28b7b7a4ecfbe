// Message: a traced message's journey (GET messages/<id>/journey, docs/journeys.md), drawn
// on the mesh (graph.js, the Topology page's graph): each forwarded step an arrow from the
// node to its peer, numbered in order, the node that received it and the one that acked it
// marked; below, every step in causal order with the time since the first and since the
// one before. Admin only, as the API. Every value goes in as text (MG.el), never as HTML.
"use strict";

(function () {
  const { el, fmt } = MG;
  const POSITIONS_KEY = "meshgate.topology.positions";  // where the Topology page put the nodes
  const TONES = {
    delivered: "good", acked: "good", peer_stored: "good", requeued: "warn", duplicate_dropped: "muted",
    dead_lettered: "bad", expired: "bad", dropped: "bad",
  };
  const box = document.getElementById("journey");
  const messageId = box.dataset.id;
  const form = document.getElementById("lookup");
  const input = document.getElementById("message-id");

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const id = input.value.trim();
    if (id) window.location.assign("/messages/" + encodeURIComponent(id) + "/");
  });

  // -- finding traced messages (GET messages: journey_search) -------------------------------------
  const search = document.getElementById("search");
  const hitsBox = document.getElementById("search-hits");
  const messageHref = (id) => "/messages/" + encodeURIComponent(id) + "/";
  const PREVIEW = 80;  // characters of a body shown in a hit (the node keeps [journeys] body_preview bytes)

  function received(hit) {
    const headers = Object.entries(hit.headers || {}).filter(([name]) => name !== "trace");
    const body = hit.body_preview || "";
    return [
      body ? el("span", { class: "mono hit-body", title: body }, body.length > PREVIEW ? body.slice(0, PREVIEW) + "…" : body) : null,
      ...headers.slice(0, 3).map(([name, value]) => el("span", { class: "hit-header" }, " · ", el("span", { class: "mono" }, name + "=" + value))),
    ];
  }

  function renderHits(answer) {
    if (!answer.hits.length) {
      hitsBox.replaceChildren(el("p", { class: "empty" }, "No traced message matches. Records age out ([journeys] max_age_s), " +
        "and only traced messages are recorded."));
    } else {
      hitsBox.replaceChildren(MG.table([
        { label: "Time", value: (h) => fmt.time(h.time) },
        { label: "Message", value: (h) => el("a", { class: "mono hit-link", href: messageHref(h.root) }, h.root) },
        { label: "Node", value: (h) => h.node_name },
        { label: "Destination", value: (h) => el("span", { class: "mono" }, h.destination || "") },
        { label: "Last step", value: (h) => el("span", { class: "step-name " + (TONES[h.last_step] || "") }, h.last_step.replace(/_/g, " ")) },
        { label: "Steps", num: true, value: (h) => fmt.n(h.steps) },
        { label: "Received with", value: received },
      ], answer.hits, { rowAttributes: (h) => ({ dataset: { root: h.root } }) }));
    }
    const failed = answer.failures.length;
    if (failed) hitsBox.append(el("p", { class: "note" }, failed + " node(s) could not answer: their messages are missing."));
    document.body.dataset.hits = String(answer.hits.length);
  }

  search.addEventListener("submit", async (event) => {
    event.preventDefault();
    const query = {};
    for (const name of ["queue", "header", "body"]) {
      const value = search.elements[name].value;
      if (value) query[name] = value;
    }
    const since = search.elements.since.value;
    if (since) query.since = Date.now() / 1000 - Number(since);
    try {
      renderHits(await MG.api("messages", { query }));
    } catch (error) {
      MG.loadFailed("find traced messages", error, hitsBox);
      document.body.dataset.hits = "error";
    }
  });
  if (!messageId) {
    input.focus();
    return;
  }

  const stepsBox = document.getElementById("steps");
  const facts = document.getElementById("facts");
  const summary = document.getElementById("path-summary");
  const taken = document.getElementById("taken");
  const cy = MG.graph.create(document.getElementById("graph"), [
    { selector: "node.unvisited", style: { opacity: 0.4 } },
    { selector: "node.origin", style: { "border-color": "#2f6fde", "border-width": 6 } },
    { selector: "node.acked", style: { "border-color": "#1f9d55", "border-width": 6, "border-style": "double" } },
    { selector: "node.origin.acked", style: { "border-color": "#2f6fde", "border-style": "double", "border-width": 8 } },
    { selector: "edge.link", style: { "line-color": "#d5dce6", width: 2, label: "" } },
    { selector: "edge.hop", style: {
      "line-color": "#e67e22", "target-arrow-color": "#e67e22", "target-arrow-shape": "triangle", "arrow-scale": 1.4,
      width: 4, "font-size": 14, "font-weight": 700, color: "#ffffff", "text-background-color": "#e67e22",
      "text-background-opacity": 1, "text-background-shape": "roundrectangle", "text-background-padding": 4,
      "control-point-step-size": 46,
    } },
  ]);

  const since = (step, first) => (step.time - first.time) * 1000;

  function ms(value) {
    if (value < 1000) return value.toFixed(value < 10 ? 1 : 0) + " ms";
    return fmt.duration(value);
  }

  function savedPositions() {
    try {
      return JSON.parse(window.localStorage.getItem(POSITIONS_KEY)) || {};
    } catch (error) {
      return {};
    }
  }

  // -- the path on the graph ---------------------------------------------------------------------
  function hopsOf(steps) {
    return steps.filter((s) => s.step === "forwarded" && s.peer).map((s, index) => ({ number: index + 1, from: s.node, to: s.peer, step: s }));
  }

  function draw(meshNodes, meshLinks, journey) {
    const names = { ...journey.nodes };
    for (const row of meshNodes) names[row.id] = row.name;
    const steps = journey.steps;
    const visited = new Set(steps.flatMap((s) => (s.peer ? [s.node, s.peer] : [s.node])));
    const received = steps.find((s) => s.step === "received");
    const ackedOn = new Set(steps.filter((s) => s.step === "acked").map((s) => s.node));
    const hops = hopsOf(steps);
    const rows = [...meshNodes];
    for (const id of visited) {  // a node the steps name that writes no snapshots
      if (!rows.some((row) => row.id === id)) rows.push({ id, name: names[id] || id, state: "silent" });
    }
    const first = steps[0];
    cy.batch(() => {
      for (const row of rows) {
        const marks = [];
        if (received && received.node === row.id) marks.push("received");
        if (ackedOn.has(row.id)) marks.push("acked");
        const classes = [visited.has(row.id) ? "visited" : "unvisited", marks.includes("received") && "origin",
          marks.includes("acked") && "acked"].filter(Boolean).join(" ");
        cy.add({ group: "nodes", classes, data: { id: row.id, name: row.name, state: row.state,
          label: row.name + (marks.length ? "\n" + marks.join(" · ") : "") } });
      }
      for (const link of meshLinks) {
        if (cy.getElementById(link.a).length && cy.getElementById(link.b).length) {
          cy.add({ group: "edges", classes: "link", data: { id: "link:" + link.id, source: link.a, target: link.b, width: 2, label: "" } });
        }
      }
      for (const hop of hops) {
        cy.add({ group: "edges", classes: "hop", data: { id: "hop:" + hop.number, source: hop.from, target: hop.to,
          width: 4, label: String(hop.number), number: hop.number } });
      }
    });
    const saved = savedPositions();
    if (cy.nodes().every((node) => saved[node.id()])) {
      cy.nodes().forEach((node) => node.position(saved[node.id()]));
      MG.graph.fit(cy, 60, 1.6);
    } else {
      cy.layout({ name: "circle", animate: false, fit: false, startAngle: -Math.PI / 2 + Math.PI / 6, avoidOverlap: true }).run();
      MG.graph.fit(cy, 60, 1.6);
    }
    // The path in words, for screen readers and tests (a canvas cannot be read).
    document.getElementById("path-hops").replaceChildren(...hops.map((hop) => el("li", {
      dataset: { from: names[hop.from] || hop.from, to: names[hop.to] || hop.to },
    }, (names[hop.from] || hop.from) + " → " + (names[hop.to] || hop.to) + " at +" + ms(since(hop.step, first)))));
    const graph = document.getElementById("graph");
    graph.dataset.hops = String(cy.edges(".hop").length);
    graph.dataset.visited = String(cy.nodes(".visited").length);
    const nameOf = (node) => node.data("name");
    graph.dataset.path = cy.edges(".hop").map((e) => nameOf(e.source()) + ">" + nameOf(e.target()) + ":" + e.data("label")).join(" ");
    graph.dataset.origin = cy.nodes(".origin").map(nameOf).join(" ");
    graph.dataset.acked = cy.nodes(".acked").map(nameOf).join(" ");
    summary.textContent = !steps.length ? "no step recorded" : hops.length
      ? hops.length + (hops.length === 1 ? " hop" : " hops") + " · " + visited.size + " of " + rows.length + " nodes"
      : "stayed on " + (names[first.node] || first.node);
    return names;
  }

  // -- the facts beside the graph ------------------------------------------------------------------
  function fact(label, value) {
    return value === null || value === undefined || value === "" ? [] : [el("dt", null, label), el("dd", null, value)];
  }

  function messageLink(id) {
    return el("a", { class: "mono", href: "/messages/" + encodeURIComponent(id) + "/" }, id);
  }

  function renderFacts(journey, names) {
    const steps = journey.steps;
    if (!steps.length) {
      facts.replaceChildren(el("p", { class: "empty" }, "Nothing to show: no node recorded this message."));
      return;
    }
    const first = steps[0];
    const last = steps[steps.length - 1];
    // Where it stands: its last step but the sender's "the peer has it" (peer_stored comes late).
    const latest = [...steps].reverse().find((s) => s.step !== "peer_stored") || last;
    const received = steps.find((s) => s.step === "received") || first;
    const acked = steps.find((s) => s.step === "acked");
    const dead = steps.find((s) => s.step === "dead_lettered");
    const deliveries = steps.filter((s) => s.step === "delivered").length;
    const nodes = new Set(steps.map((s) => s.node));
    facts.replaceChildren(el("div", null,
      el("h2", null, "The message"),
      el("dl", { class: "facts" },
        fact("Id", el("span", { class: "mono" }, journey.id)),
        fact("Root", first.root !== journey.id ? messageLink(first.root) : null),
        fact("Sent to", received.destination ? el("span", { class: "mono" }, received.destination) : null),
        fact("Received on", (names[received.node] || received.node) + (received.protocol ? " over " + received.protocol.toUpperCase() : "")),
        fact("At", fmt.time(received.time)),
        fact("By", received.user),
        fact("From", received.remote ? el("span", { class: "mono" }, received.remote) : null),
        fact("Size", received.size !== undefined ? fmt.bytes(received.size) + (received.persistent ? " · persistent" : "") : null),
        fact("Copy of", received.from_id ? messageLink(received.from_id) : null),
        fact("Last step", [el("span", { class: "step-name " + (TONES[latest.step] || "") }, latest.step.replace(/_/g, " ")),
          " on " + (names[latest.node] || latest.node)]),
        fact("Acked", acked ? "on " + (names[acked.node] || acked.node) + (acked.latency_ms !== undefined && acked.latency_ms !== null
          ? ", " + ms(acked.latency_ms) + " after it was received" : "") : "not yet"),
        fact("Deliveries", deliveries ? fmt.n(deliveries) : null),
        fact("Dead-lettered", dead ? [dead.reason || "", dead.next_id ? [" → ", messageLink(dead.next_id)] : ""] : null),
        fact("Steps", fmt.n(steps.length) + " on " + fmt.n(nodes.size) + (nodes.size === 1 ? " node" : " nodes") +
          ", over " + ms(since(last, first))))));
  }

  // -- the steps -------------------------------------------------------------------------------------
  function details(step, names) {
    const parts = [];
    const name = (id) => el("strong", null, names[id] || id);
    const add = (...part) => parts.push(part);
    if (step.step === "received") {
      if (step.destination) add("to ", el("span", { class: "mono" }, step.destination));
      if (step.protocol) add(step.protocol.toUpperCase());
      if (step.user) add("by ", el("strong", null, step.user));
      if (step.remote) add("from ", el("span", { class: "mono" }, step.remote));
    }
    if (step.queue) add("queue ", el("a", { href: MG.queueHref(step.queue, step.vhost || "/") }, step.queue));
    if (step.peer) {
      if (step.step === "forwarded") add("to ", name(step.peer));
      else if (step.step === "link_received") add("from ", name(step.peer));
      else if (step.step === "peer_stored") add("stored by ", name(step.peer));
      else add("peer ", name(step.peer));
    }
    if (step.consumer) add("consumer ", el("span", { class: "mono" }, step.consumer));
    if (step.connection) add("connection ", el("span", { class: "mono" }, step.connection));
    if (step.ack_mode) add("ack ", step.ack_mode);
    if (step.deliveries && step.step !== "received") add("delivery " + fmt.n(step.deliveries));
    if (step.redelivered) add(el("span", { class: "warn" }, "redelivered"));
    if (step.reason) add("reason: ", el("em", null, step.reason));
    if (step.latency_ms !== undefined && step.latency_ms !== null) add("latency ", el("strong", null, ms(step.latency_ms)));
    if (step.next_id) add("became ", messageLink(step.next_id));
    if (step.from_id) add("copy of ", messageLink(step.from_id));
    if (step.id !== messageId) add("copy ", el("span", { class: "mono" }, step.id));
    if (step.detail) add(step.detail);
    return parts.flatMap((part, index) => (index ? [el("span", { class: "sep" }, " · "), ...part] : part));
  }

  function renderSteps(journey, names) {
    const steps = journey.steps;
    if (!steps.length) {
      stepsBox.replaceChildren(el("div", { class: "empty journey-empty" },
        el("p", null, "No node recorded message ", el("span", { class: "mono" }, journey.id), "."),
        el("p", { class: "note" }, "Either it was not traced (sent without a trace:true header, its destination not traced by trace-next " +
          "or trace-on), " +
          "its records aged out (journeys keep max_records, max_bytes and max_age_s), or journeys are off on the nodes " +
          "([journeys] enabled = true; those listed below could not answer). Check the id: it is the message-id header.")));
      return;
    }
    const first = steps[0];
    const hops = new Map(hopsOf(steps).map((hop) => [hop.step, hop.number]));
    let previous = null;
    stepsBox.replaceChildren(MG.table([
      { label: "+ms", num: true, title: "time since the first step (the nodes' clocks)",
        value: (s) => el("span", { title: fmt.time(s.time) }, "+" + since(s, first).toFixed(1)) },
      { label: "Δ", num: true, title: "time since the step before", value: (s) => {
        const index = steps.indexOf(s);
        return index ? el("span", { class: "delta" }, ms(since(s, steps[index - 1]))) : "";
      } },
      { label: "Node", value: (s) => el("strong", null, names[s.node] || s.node_name || s.node) },
      { label: "Step", value: (s) => [el("span", { class: "step-name " + (TONES[s.step] || "") }, s.step.replace(/_/g, " ")),
        hops.has(s) ? el("span", { class: "hop-number", title: "hop " + hops.get(s) + " on the graph" }, String(hops.get(s))) : null] },
      { label: "Details", value: (s) => details(s, names) },
    ], steps, {
      rowAttributes: (s) => {
        const moved = previous !== null && previous.node !== s.node;
        previous = s;
        return { class: [moved && "node-change", hops.has(s) && "hop-row"].filter(Boolean).join(" ") || null,
          dataset: { node: names[s.node] || s.node, step: s.step } };
      },
    }));
  }

  function renderFailures(failures, names) {
    const card = document.getElementById("failures-card");
    card.hidden = !failures.length;
    document.getElementById("failures").replaceChildren(...failures.map((failure) => el("li", null,
      el("strong", null, failure.node ? names[failure.node] || failure.node : "a node"), ": ", failure.message,
      failure.code === "conflict" ? " (journeys are off there: [journeys] enabled = true)" : "")));
  }

  async function load() {
    try {
      const [journey, nodes, links] = await Promise.all([
        MG.api("messages/" + encodeURIComponent(messageId) + "/journey"),
        MG.api("nodes", { query: { page_size: 500 } }), MG.api("links", { query: { page_size: 500 } }),
      ]);
      MG.problem(null);
      const names = draw(nodes.items, links.items, journey);
      renderFacts(journey, names);
      renderSteps(journey, names);
      renderFailures(journey.failures, names);
      taken.textContent = "read " + new Date().toLocaleTimeString();
      document.body.dataset.journey = String(journey.steps.length);
    } catch (error) {
      MG.loadFailed("read the message's journey", error, stepsBox);
      facts.replaceChildren(el("p", { class: "empty" }, "Nothing to show."));
      document.body.dataset.journey = "error";
    }
  }

  load();
  MG.live(["mesh"], {});  // the top bar's live indicator
})();
