// Overview: the mesh's totals, its message rates over time (and latency, from the metrics
// pipeline) and a row per node, kept live by the "mesh" updates (about once a second).
"use strict";

(function () {
  const { el, fmt } = MG;
  const statsBox = document.getElementById("stats");
  const nodesBox = document.getElementById("nodes");
  const nodesNote = document.getElementById("nodes-note");
  const charts = MG.historyCharts({
    path: "overview/history", what: "read the rates over time",
    rates: { box: document.getElementById("chart") }, source: document.getElementById("chart-source"),
    ranges: document.getElementById("chart-range"),
    latency: { card: document.getElementById("latency-card"), box: document.getElementById("latency-chart") },
  });
  let sort = { field: "name", reverse: false };
  let latest = null;  // {overview, nodes}

  function renderStats(overview) {
    const tiles = [
      MG.stat("Nodes up", fmt.n(overview.nodes_up) + " / " + fmt.n(overview.nodes), {
        tone: overview.nodes_down ? "bad" : overview.nodes ? "good" : null,
        hint: overview.nodes_down ? fmt.n(overview.nodes_down) + " down" : "none down",
      }),
      MG.stat("Links up", fmt.n(overview.links_up), {
        tone: overview.links_down ? "bad" : null,
        hint: overview.links_down ? fmt.n(overview.links_down) + " down" : "none down",
      }),
      MG.stat("Queues", fmt.n(overview.queues)),
      MG.stat("Messages", fmt.n(overview.messages), { hint: "waiting, in flight, in doubt" }),
      MG.stat("Consumers", fmt.n(overview.consumers), { hint: "on queues" }),
      MG.stat("Connections", fmt.n(overview.connections)),
      MG.stat("In doubt", fmt.n(overview.in_doubt), {
        tone: overview.in_doubt ? "warn" : null,
        hint: "waiting for a peer's word",
      }),
      MG.stat("Enqueued", fmt.rate(overview.rates.enqueue), { hint: "acked " + fmt.rate(overview.rates.ack) }),
    ];
    if (overview.metrics_behind.length) {
      tiles.push(MG.stat("Metrics behind", fmt.n(overview.metrics_behind.length), {
        tone: "warn", hint: overview.metrics_behind.join(", "),
        title: "these nodes cannot write to Redis fast enough: what the console shows of them lags",
      }));
    }
    statsBox.replaceChildren(...tiles);
  }

  function metricsCell(row) {
    const metrics = row.node && row.node.metrics;
    if (!metrics) return el("span", { class: "muted" }, "–");
    if (metrics.state === "behind") {
      return el("span", { class: "state leaving", title: metrics.last_error || "" },
        "behind · " + fmt.n(metrics.buffered) + " buffered" + (metrics.dropped ? " · " + fmt.n(metrics.dropped) + " dropped" : ""));
    }
    return el("span", { class: metrics.state === "ok" ? "good" : "muted" }, metrics.state);
  }

  // A down node's last rates are history, not traffic: not shown.
  function rateCell(row, value) {
    if (row.state === "down") return el("span", { class: "zero" }, "–");
    return el("span", { class: value ? null : "zero" }, fmt.rate(value));
  }

  const columns = [
    { label: "Node", sort: "name", value: (row) => el("strong", {
      title: row.node ? "STOMP " + (row.node.addresses.stomp || "–") + " · Meshgate " + row.node.version + " · id " + row.id
        : "id " + row.id + ": known only from its peers",
    }, el("a", { href: "/topology/?node=" + encodeURIComponent(row.name) }, row.name)) },
    { label: "State", sort: "state", value: (row) => MG.badge(row.state) },
    { label: "Snapshot", sort: "age", num: true, title: "when the node last wrote its state",
      value: (row) => el("span", { class: row.state === "down" ? "bad" : null }, fmt.ago(row.age)) },
    { label: "Queues", sort: "queues", num: true, value: (row) => fmt.n(row.queues) },
    { label: "Messages", sort: "messages", num: true, value: (row) => fmt.n(row.messages) },
    { label: "Consumers", sort: "consumers", num: true, value: (row) => fmt.n(row.consumers) },
    { label: "Connections", sort: "node.connections", num: true, value: (row) => fmt.n(row.node && row.node.connections) },
    { label: "In doubt", sort: "in_doubt", num: true,
      value: (row) => el("span", { class: row.in_doubt ? "warn" : null }, fmt.n(row.in_doubt)) },
    { label: "Enqueue", sort: "rates.enqueue", num: true, value: (row) => rateCell(row, row.rates.enqueue) },
    { label: "Ack", sort: "rates.ack", num: true, value: (row) => rateCell(row, row.rates.ack) },
    { label: "Forward", sort: "rates.forward", num: true, value: (row) => rateCell(row, row.rates.forward) },
    { label: "Redistribute", sort: "rates.redistribute", num: true, value: (row) => rateCell(row, row.rates.redistribute) },
    { label: "Links", sort: "links_down", num: true, title: "links up · down, as the node reports them",
      value: (row) => el("span", null, fmt.n(row.links_up) + " up",
        row.links_down ? el("span", { class: "bad" }, " · " + fmt.n(row.links_down) + " down") : null) },
    { label: "Memory", sort: "node.memory_used", num: true, title: "bytes of queued messages, as memory_limit meters them",
      value: (row) => (row.node ? el("span", { title: row.node.memory_limit ? "limit " + fmt.bytes(row.node.memory_limit) : "no limit" },
        fmt.bytes(row.node.memory_used)) : "–") },
    { label: "Metrics", sort: "node.metrics.state", value: metricsCell },
  ];

  function renderNodes(nodes) {
    const down = nodes.filter((row) => row.state === "down").length;
    nodesNote.textContent = nodes.length ? fmt.n(nodes.length) + " nodes" + (down ? ", " + down + " down" : "") : "";
    nodesBox.replaceChildren(MG.table(columns, MG.sortRows(nodes, sort), {
      sort,
      onSort: (next) => { sort = next; renderNodes(latest.nodes); },
      rowAttributes: (row) => (row.state === "down" ? { class: "down", title: "down: its numbers are from its last snapshot" } : null),
      empty: "No node has written a snapshot in the last minutes. Start a node with [metrics] redis_url set " +
        "to this console's Redis, and it appears here within a second.",
    }));
  }

  function render(overview, nodes) {
    latest = { overview, nodes };
    renderStats(overview);
    renderNodes(nodes);
  }

  async function load() {
    try {
      const [overview, nodes] = await Promise.all([MG.api("overview"), MG.api("nodes", { query: { page_size: 500 } })]);
      MG.problem(null);
      if (!latest) render(overview, nodes.items);
    } catch (error) {
      MG.loadFailed("read the overview", error, nodesBox);
    }
  }

  load();
  MG.live(["mesh"], {
    mesh(update) {
      MG.problem(null);
      render(update.overview, update.nodes);
      charts.live(update.overview.taken_at, update.overview.rates);
    },
  });
})();
