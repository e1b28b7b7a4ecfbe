// Topology: the nodes and links as a graph (cytoscape), updated in place from the "mesh"
// updates; redistribution events flash the link they crossed. Clicking a node shows its
// partial queues, links and subscriptions in the side panel (nodes/<id>). The graph's
// styles and layout are graph.js's, shared with the Message page.
"use strict";

(function () {
  const { el, fmt } = MG;
  const POSITIONS_KEY = "meshgate.topology.positions";
  const FLOW_LENGTH = 12;  // redistribution events listed under the graph
  const CERTIFICATE_WARNING_DAYS = 14;  // as the node's certificate_expiring event
  const side = document.getElementById("side");
  const summary = document.getElementById("summary");
  const flow = document.getElementById("flow");
  const empty = document.getElementById("graph-empty");
  const names = {};  // node id -> name
  let selected = new URLSearchParams(window.location.search).get("node");  // a node id or name
  let dashOffset = 0;

  const cy = MG.graph.create(document.getElementById("graph"), [
    { selector: "node.flash", style: { "border-color": "#e67e22", "border-width": 6 } },
    { selector: "edge[rate > 0]", style: { "line-color": "#2f6fde", "line-style": "dashed", "line-dash-pattern": [9, 5] } },
    { selector: "edge[state = \"down\"]", style: { "line-color": "#d63b3b", "line-style": "dotted", color: "#b42318" } },
    { selector: "edge.flash", style: { "line-color": "#e67e22", "transition-property": "line-color", "transition-duration": "0.4s" } },
  ]);

  function savedPositions() {
    try {
      return JSON.parse(window.localStorage.getItem(POSITIONS_KEY)) || {};
    } catch (error) {
      return {};
    }
  }

  function savePositions() {
    const positions = {};
    cy.nodes().forEach((node) => { positions[node.id()] = node.position(); });
    window.localStorage.setItem(POSITIONS_KEY, JSON.stringify(positions));
  }

  function nodeLabel(row) {
    const messages = fmt.n(row.messages) + (row.messages === 1 ? " message" : " messages");
    return row.name + "\n" + (row.state === "down" ? "down · " : "") + messages;
  }

  function edgeLabel(link) {
    if (link.state === "down") return "down " + fmt.since(link.since);
    const parts = [fmt.rate(link.rate)];
    const counts = ["in flight " + fmt.n(link.in_flight), "backlog " + fmt.n(link.backlog)];
    if (link.in_doubt) counts.push("in doubt " + fmt.n(link.in_doubt));
    return parts.concat(counts.join(" · ")).join("\n");
  }

  function edgeWidth(link) {
    return 2 + Math.min(10, 4 * Math.log10(1 + link.rate));
  }

  // Where a node the graph has not seen goes: its saved place, else beside a linked node.
  function placeFor(id, links) {
    const saved = savedPositions()[id];
    if (saved) return { position: saved, placed: true };
    for (const link of links) {
      const other = link.a === id ? link.b : link.b === id ? link.a : null;
      const node = other && cy.getElementById(other);
      if (node && node.length) {
        const at = node.position();
        return { position: { x: at.x + 80 + Math.random() * 40, y: at.y + 80 + Math.random() * 40 }, placed: false };
      }
    }
    const extent = cy.extent();
    return { position: { x: (extent.x1 + extent.x2) / 2 + Math.random() * 60, y: (extent.y1 + extent.y2) / 2 + Math.random() * 60 }, placed: false };
  }

  // Place the new nodes with a force layout that leaves the others where they are.
  function layoutAround(newNodes, first) {
    MG.graph.layoutAround(cy, newNodes, first, savePositions);
  }

  const fitView = () => MG.graph.fit(cy);

  function draw(nodes, links) {
    const seen = new Set();
    const added = [];
    let restored = 0;
    cy.batch(() => {
      for (const row of nodes) {
        names[row.id] = row.name;
        seen.add(row.id);
        const data = { id: row.id, label: nodeLabel(row), state: row.state, name: row.name };
        const node = cy.getElementById(row.id);
        if (node.length) {
          node.data(data);
        } else {
          const place = placeFor(row.id, links);
          added.push(cy.add({ group: "nodes", data, position: place.position }));
          if (place.placed) restored += 1;
        }
      }
      for (const link of links) {
        seen.add(link.id);
        const data = { state: link.state, rate: link.state === "up" ? link.rate : 0, label: edgeLabel(link), width: edgeWidth(link) };
        const edge = cy.getElementById(link.id);
        if (edge.length) edge.data(data);
        else if (cy.getElementById(link.a).length && cy.getElementById(link.b).length) {
          cy.add({ group: "edges", data: { id: link.id, source: link.a, target: link.b, ...data } });
        }
      }
      cy.elements().filter((element) => !seen.has(element.id())).remove();
    });
    if (added.length && restored < added.length) {
      layoutAround(cy.collection(added), added.length === cy.nodes().length);
    } else if (added.length && added.length === cy.nodes().length) {
      fitView();
    }
    if (selected && !cy.$(":selected").length) {
      const node = cy.nodes().filter((n) => n.id() === selected || n.data("name") === selected);
      if (node.length) node.select();
    }
    describe(nodes);
  }

  // The graph in words, for screen readers (and for tests that cannot read a canvas).
  function describe(nodes) {
    const list = document.getElementById("graph-nodes");
    list.replaceChildren(...nodes.map((row) => el("li", { dataset: { node: row.name, state: row.state } },
      row.name + ": " + row.state + ", " + fmt.n(row.messages) + " messages")));
    document.body.dataset.drawn = String(cy.nodes().length);
  }

  function renderSummary(overview) {
    empty.hidden = overview.nodes > 0;
    if (!overview.nodes) {
      summary.textContent = "";
      return;
    }
    summary.textContent = fmt.n(overview.nodes_up) + " of " + fmt.n(overview.nodes) + " nodes up · " +
      fmt.n(overview.links_up) + " links up" + (overview.links_down ? ", " + fmt.n(overview.links_down) + " down" : "") +
      " · forwarding " + fmt.rate(overview.rates.forward);
  }

  // -- the side panel: one node in detail ----------------------------------------------------
  function fact(label, value) {
    return [el("dt", null, label), el("dd", null, value)];
  }

  // An RFC 4514 name that may wrap after its commas ("CN=a,O=b" → "CN=a,", "O=b"), not within a part.
  function breakable(subject) {
    return subject.split(",").flatMap((part, index) => (index ? [",", el("wbr"), el("span", null, part)] : [el("span", null, part)]));
  }

  // The certificates its TLS listeners present, the soonest to expire first; none without TLS.
  function certificates(node) {
    if (!node || !node.certificates || !node.certificates.length) return null;
    const rows = [...node.certificates].sort((a, b) => a.not_after - b.not_after || a.listener.localeCompare(b.listener));
    return [
      el("h3", null, "Certificates"),
      MG.table([
        { label: "Listener", value: (c) => el("span", { class: "mono" }, c.listener) },
        { label: "Subject", value: (c) => el("span", { class: "mono subject" }, breakable(c.subject)) },
        { label: "Expires", value: (c) => el("span", { title: fmt.time(c.not_after) }, fmt.date(c.not_after)) },
        { label: "Left", num: true, title: "time until it expires", value: (c) => fmt.until(c.not_after) },
      ], rows, {
        rowAttributes: (c) => {
          const left = c.not_after - Date.now() / 1000;
          const tone = left <= 0 ? "bad" : left <= CERTIFICATE_WARNING_DAYS * 86400 ? "warn" : null;
          const title = tone && (tone === "bad" ? "expired" : "under " + CERTIFICATE_WARNING_DAYS + " days left") +
            ": renew it, then send the node SIGHUP or run meshgate reload-tls";
          return { class: tone, title, dataset: { listener: c.listener, tone: tone || "ok" } };
        },
      }),
    ];
  }

  function renderNode(detail) {
    const node = detail.node;
    const messages = (q) => q.depth + q.in_flight + q.forwarding + q.in_doubt;
    const queues = detail.partial_queues.filter((q) => MG.vhost === null || (q.vhost || "/") === MG.vhost).sort((a, b) => messages(b) - messages(a) || a.name.localeCompare(b.name));
    side.replaceChildren(el("div", null,
      el("h2", null, detail.name, MG.badge(detail.state)),
      detail.state === "down" ? el("p", { class: "note bad" }, "Down: what follows is its last snapshot, " + fmt.ago(detail.age) + ".") : null,
      node ? el("dl", { class: "facts" },
        fact("STOMP", el("span", { class: "mono" }, node.addresses.stomp || "–")),
        node.addresses.stomp_tls ? fact("STOMP TLS", el("span", { class: "mono" }, node.addresses.stomp_tls)) : null,
        fact("Mesh link", el("span", { class: "mono" }, node.addresses.link || "–")),
        fact("Version", node.version + (node.group_name ? " · group " + node.group_name : "")),
        fact("Started", fmt.since(node.started_at)),
        fact("Snapshot", fmt.ago(detail.age)),
        fact("Connections", fmt.n(node.connections)),
        fact("Messages", fmt.n(detail.messages) + " in " + fmt.n(detail.partial_queues.length) + " queues"),
        fact("In doubt", fmt.n(node.in_doubt)),
        fact("Memory", fmt.bytes(node.memory_used) + (node.memory_limit ? " of " + fmt.bytes(node.memory_limit) : "")),
        fact("Journal", fmt.bytes(node.store_bytes)),
        fact("Metrics", node.metrics.state + (node.metrics.dropped ? " · " + fmt.n(node.metrics.dropped) + " dropped" : ""))) :
        el("p", { class: "note" }, "This node writes no snapshots: it is known only from its peers' links."),
      certificates(node),
      el("h3", null, "Partial queues" + (MG.vhost === null ? "" : " of vhost " + MG.vhost)),
      MG.table([
        { label: "Queue", value: (q) => el("a", { href: MG.queueHref(q.name, q.vhost || "/") }, q.name) },
        ...(MG.vhost === null ? [{ label: "Vhost", value: (q) => el("span", { class: "mono" }, q.vhost || "/") }] : []),
        { label: "Depth", num: true, value: (q) => fmt.n(q.depth) },
        { label: "In flight", num: true, value: (q) => fmt.n(q.in_flight) },
        { label: "Fwd", num: true, title: "forwarding: sent over links, not yet stored by the peer", value: (q) => fmt.n(q.forwarding) },
        { label: "Doubt", num: true, title: "in doubt", value: (q) => fmt.n(q.in_doubt) },
        { label: "Cons.", num: true, title: "local consumers", value: (q) => fmt.n(q.consumers) },
        { label: "Oldest", num: true, title: "how long the oldest waiting message has waited", value: (q) => fmt.duration(q.oldest_age_ms) },
      ], queues, { empty: MG.vhost === null ? "No queues on this node yet." : "No queues of vhost " + MG.vhost + " on this node." }),
      el("h3", null, "Links"),
      MG.table([
        { label: "Peer", value: (l) => l.peer_name },
        { label: "State", value: (l) => MG.badge(l.state) },
        { label: "In flight", num: true, value: (l) => fmt.n(l.in_flight) },
        { label: "Backlog", num: true, value: (l) => fmt.n(l.backlog) },
        { label: "Out", num: true, title: "messages forwarded to the peer since the node started", value: (l) => fmt.n(l.forwarded_out) },
        { label: "In", num: true, title: "messages received from the peer since the node started", value: (l) => fmt.n(l.forwarded_in) },
      ], detail.links, { empty: "No links." }),
      el("h3", null, "Topic subscriptions"),
      MG.table([
        { label: "Destination", value: (s) => el("span", { title: s.name }, s.destination) },
        { label: "Kind", value: (s) => (s.durable ? "durable" : "—") + (s.active ? "" : " · away") },
        { label: "Depth", num: true, value: (s) => fmt.n(s.depth) },
        { label: "In flight", num: true, value: (s) => fmt.n(s.in_flight) },
      ], detail.subscriptions, { empty: "No topic subscriptions." })));
  }

  let loading = false;
  let lastLoad = 0;
  async function loadSelected(force) {
    if (!selected || loading || (!force && Date.now() - lastLoad < 2000)) return;
    loading = true;
    lastLoad = Date.now();
    const asked = selected;
    try {
      const detail = await MG.api("nodes/" + encodeURIComponent(asked));
      if (asked === selected) renderNode(detail);
    } catch (error) {
      if (asked === selected) side.replaceChildren(el("p", { class: "result error" }, "Could not load the node: " + MG.explain(error)));
    } finally {
      loading = false;
    }
  }

  function select(id) {
    selected = id;
    const params = new URLSearchParams(window.location.search);
    if (id) params.set("node", names[id] || id);
    else params.delete("node");
    const query = params.toString();
    window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : ""));
    if (!id) {
      side.replaceChildren(el("p", { class: "empty" }, "Click a node to see its partial queues."));
      return;
    }
    side.replaceChildren(el("p", { class: "empty" }, "Loading " + (names[id] || id) + "…"));
    loadSelected(true);
  }

  cy.on("tap", "node", (event) => select(event.target.id()));
  cy.on("tap", (event) => { if (event.target === cy) { cy.$(":selected").unselect(); select(null); } });
  cy.on("dragfree", "node", savePositions);
  document.getElementById("relayout").addEventListener("click", () => {
    window.localStorage.removeItem(POSITIONS_KEY);
    layoutAround(cy.nodes(), true);
  });

  // -- flow: moving dashes on forwarding links, a flash where a redistribution went ---------------
  setInterval(() => {
    dashOffset = (dashOffset - 1.5) % 1400;
    cy.edges("[rate > 0]").style("line-dash-offset", dashOffset);
  }, 50);

  function flash(elements) {
    elements.addClass("flash");
    setTimeout(() => elements.removeClass("flash"), 1500);
  }

  function flowItem(event, fresh) {
    return el("li", { class: fresh ? "fresh" : null },
      el("time", { title: fmt.time(event.time) }, new Date(event.time * 1000).toLocaleTimeString()),
      el("span", null, el("strong", null, fmt.n(event.count)), event.count === 1 ? " message of " : " messages of ",
        el("a", { href: "/queues/" + encodeURIComponent(event.queue) + "/" }, event.queue),
        " moved " + (names[event.source] || event.source) + " → " + (names[event.target] || event.target)));
  }

  function redistributed(event) {
    const pair = [event.source, event.target].sort().join("~");
    flash(cy.getElementById(pair).union(cy.getElementById(event.target)));
    const placeholder = flow.querySelector(".empty");
    if (placeholder) placeholder.remove();
    flow.prepend(flowItem(event, true));
    while (flow.children.length > FLOW_LENGTH) flow.lastElementChild.remove();
  }

  // -- data -----------------------------------------------------------------------------------
  async function load() {
    try {
      const [overview, nodes, links, recent] = await Promise.all([
        MG.api("overview"), MG.api("nodes", { query: { page_size: 500 } }), MG.api("links", { query: { page_size: 500 } }),
        MG.api("events", { query: { kind: "redistribution", page_size: FLOW_LENGTH } }),
      ]);
      MG.problem(null);
      if (!cy.nodes().length) {
        renderSummary(overview);
        draw(nodes.items, links.items);
      }
      if (recent.items.length && flow.querySelector(".empty")) flow.replaceChildren(...recent.items.map((event) => flowItem(event, false)));
    } catch (error) {
      MG.loadFailed("read the topology", error);
    }
  }

  load();
  if (selected) side.replaceChildren(el("p", { class: "empty" }, "Loading " + selected + "…"));
  loadSelected(true);
  MG.live(["mesh", "events"], {
    mesh(update) {
      MG.problem(null);
      renderSummary(update.overview);
      draw(update.nodes, update.links);
      loadSelected(false);
    },
    event({ event }) {
      if (event.kind === "redistribution") redistributed(event);
    },
  });
})();
