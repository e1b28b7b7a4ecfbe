// One queue: its totals, its partial queue on each node, its rates over time (and latency
// and depth, from the metrics pipeline), and (for
// admins) browsing, a test message, purge, move and delete, each confirmed first.
"use strict";

(function () {
  const { el, fmt } = MG;
  const root = document.getElementById("queue");
  const name = root.dataset.name;
  const path = "queues/" + encodeURIComponent(name);
  const statsBox = document.getElementById("stats");
  const partsBox = document.getElementById("parts");
  const partsNote = document.getElementById("parts-note");
  const charts = MG.historyCharts({
    path: path + "/history", what: "read the queue's rates",
    rates: { box: document.getElementById("chart") }, source: document.getElementById("chart-source"),
    ranges: document.getElementById("chart-range"),
    latency: { card: document.getElementById("pipeline-charts"), box: document.getElementById("latency-chart") },
    depth: { card: document.getElementById("pipeline-charts"), box: document.getElementById("depth-chart") },
  });
  const names = {};  // node id -> name, over the mesh
  let meshNodes = [];  // the nodes' rows (nodes API), for the send and move forms
  let row = null;  // the queue as last read; null until read, or when it is gone
  let quietUntil = 0;  // after deleting it: the snapshots still show it for a moment, so wait

  const LATENCY = "send to ack, over the messages acked since the nodes started (within a factor of two)";
  const nodeName = (id) => names[id] || id;

  function latency(histogram) {
    const p50 = MG.percentile(histogram, 0.5);
    if (p50 === null) return el("span", { class: "zero" }, "–");
    return fmt.ms(p50) + " / " + fmt.ms(MG.percentile(histogram, 0.99));
  }

  function rateCell(value) {
    return el("span", { class: value ? null : "zero" }, fmt.rate(value));
  }

  // -- the queue ----------------------------------------------------------------------------
  function renderStats() {
    const counted = row.latency.reduce((a, b) => a + b, 0);
    statsBox.replaceChildren(
      MG.stat("Messages", fmt.n(row.messages), { hint: "on " + fmt.n(row.node_count) + (row.node_count === 1 ? " node" : " nodes") }),
      MG.stat("Waiting", fmt.n(row.depth)),
      MG.stat("In flight", fmt.n(row.in_flight), { hint: "delivered, not acked" }),
      MG.stat("Forwarding", fmt.n(row.forwarding), { hint: "on their way to a peer" }),
      MG.stat("In doubt", fmt.n(row.in_doubt), { tone: row.in_doubt ? "warn" : null }),
      MG.stat("Consumers", fmt.n(row.consumers), { tone: row.depth && !row.consumers ? "warn" : null,
        hint: row.depth && !row.consumers ? "none: messages wait" : null }),
      MG.stat("Enqueued", fmt.rate(row.rates.enqueue), { hint: "acked " + fmt.rate(row.rates.ack) }),
      MG.stat("Latency p50", counted ? fmt.ms(MG.percentile(row.latency, 0.5)) : "–",
        { hint: counted ? "mean " + fmt.ms(row.latency_sum_ms / counted) : "nothing acked yet", title: LATENCY }),
      MG.stat("Latency p99", counted ? fmt.ms(MG.percentile(row.latency, 0.99)) : "–",
        { hint: counted ? "of " + fmt.n(counted) + " acked" : null, title: LATENCY }));
  }

  function remoteDemand(part) {
    const demand = part.partial.remote_demand;
    if (!demand.length) return el("span", { class: "zero" }, "0");
    const total = demand.reduce((sum, d) => sum + d.consumers, 0);
    return el("span", { title: demand.map((d) => nodeName(d.node) + ": " + d.consumers + " via " + nodeName(d.via) +
      " (" + d.hops + (d.hops === 1 ? " hop)" : " hops)")).join("\n") }, fmt.n(total));
  }

  const partColumns = [
    { label: "Node", value: (part) => (MG.admin
      ? el("a", { href: "#browse", title: "browse its messages", onclick: (event) => { event.preventDefault(); browseOn(part.node); } },
        el("strong", null, part.node_name))
      : el("strong", null, part.node_name)) },
    { label: "Messages", num: true, value: (part) => fmt.n(part.messages) },
    { label: "Waiting", num: true, value: (part) => fmt.n(part.depth) },
    { label: "In flight", num: true, value: (part) => fmt.n(part.in_flight) },
    { label: "Forwarding", num: true, value: (part) => fmt.n(part.forwarding) },
    { label: "In doubt", num: true, value: (part) => el("span", { class: part.in_doubt ? "warn" : null }, fmt.n(part.in_doubt)) },
    { label: "Consumers", num: true, value: (part) => fmt.n(part.consumers) },
    { label: "Remote", num: true, title: "consumers on other nodes that want this queue (hover for where)", value: remoteDemand },
    { label: "Oldest", num: true, title: "how long the oldest waiting message has waited", value: (part) => fmt.duration(part.oldest_age_ms) },
    { label: "Enqueue", num: true, value: (part) => rateCell(part.rates.enqueue) },
    { label: "Ack", num: true, value: (part) => rateCell(part.rates.ack) },
    { label: "Forward", num: true, value: (part) => rateCell(part.rates.forward) },
    { label: "Redist.", num: true, title: "redistributed: a backlog following consumers to another node",
      value: (part) => rateCell(part.rates.redistribute) },
    { label: "p50 / p99", num: true, title: "send-to-ack latency of the messages acked here, since the node started",
      value: (part) => latency(part.partial.latency) },
    { label: "DLQ'd", num: true, title: "dead-lettered: moved to the dead-letter queue since the node started",
      value: (part) => el("span", { class: part.partial.dead_lettered ? "warn" : "zero" }, fmt.n(part.partial.dead_lettered)) },
  ];

  function renderParts() {
    partsNote.textContent = "read " + new Date().toLocaleTimeString();
    partsBox.replaceChildren(MG.table(partColumns, row.nodes, { empty: "No node holds this queue now." }));
  }

  function gone() {
    row = null;
    statsBox.replaceChildren();
    partsNote.textContent = "";
    partsBox.replaceChildren(el("p", { class: "empty" }, "No node holds a queue named “" + name + "” now. It is made " +
      "again when a message is sent to it or a consumer subscribes. ", el("a", { href: "/queues/" }, "All queues")));
    document.querySelectorAll("#actions button").forEach((button) => { button.disabled = true; });
    if (MG.admin) {
      browse.node = null;
      browseList.replaceChildren(el("p", { class: "empty" }, "Nothing to browse."));
      browsePager.replaceChildren();
    }
  }

  async function load() {
    if (Date.now() < quietUntil) return;
    try {
      row = await MG.api(path);
      for (const part of row.nodes) names[part.node] = part.node_name;
      MG.problem(null);
      renderStats();
      renderParts();
      if (MG.admin) fillSelects();
      document.querySelectorAll("#actions button").forEach((button) => { button.disabled = false; });
    } catch (error) {
      if (error.status === 404) gone();
      else MG.loadFailed("read the queue", error, partsBox, names);
    }
  }

  async function loadNodes() {
    try {
      meshNodes = (await MG.api("nodes", { query: { page_size: 500 } })).items;
      for (const node of meshNodes) names[node.id] = node.name;
      if (MG.admin && row) fillSelects();
    } catch (error) {
      MG.loadFailed("list the nodes", error);
    }
  }

  // -- admin: results ---------------------------------------------------------------------------
  const DONE = {
    purge: (done) => "purged " + fmt.n(done.count) + (done.count === 1 ? " message" : " messages"),
    delete_queue: (done) => "deleted (" + fmt.n(done.count) + (done.count === 1 ? " waiting message" : " waiting messages") + " dropped)",
    move: (done) => "moved " + fmt.n(done.count) + (done.count === 1 ? " message " : " messages ") + done.detail,
    send: (done) => "sent, message id " + done.detail,
  };

  function report(box, title, answer) {
    const done = answer.result.map((one) => nodeName(one.node) + ": " + (DONE[one.action] ? DONE[one.action](one) : one.detail));
    const failed = MG.failureText(answer.failures, names);
    const tone = failed ? (done.length ? "partial" : "error") : "ok";
    box.prepend(el("div", { class: "result " + tone },
      el("strong", null, title), " — ", done.join("; ") || "no node holds the queue: nothing done",
      failed ? el("div", null, failed) : null,
      el("div", { class: "note" }, new Date().toLocaleTimeString())));
    while (box.children.length > 6) box.lastElementChild.remove();
  }

  function reportError(box, title, error) {
    box.prepend(el("div", { class: "result error" }, el("strong", null, title), " — ", MG.explain(error, names),
      el("div", { class: "note" }, new Date().toLocaleTimeString())));
    while (box.children.length > 6) box.lastElementChild.remove();
  }

  function reread() {
    load();
    loadBrowse();
  }

  // Ask to confirm, do it, show what happened, then `after(answer)` (null if it failed):
  // by default read the queue and the messages browsed again.
  async function act(box, title, dialog, request, after = reread) {
    if (!(await MG.dialog(dialog()))) return;
    let answer = null;
    try {
      answer = await request();
      report(box, title(), answer);
    } catch (error) {
      reportError(box, title(), error);
    }
    after(answer);
  }

  function nodeOptions(select, nodes, { all, value }) {
    const previous = value !== undefined ? value : select.value;
    select.replaceChildren(...(all ? [el("option", { value: "*" }, all)] : []),
      ...nodes.map((node) => el("option", { value: node.value }, node.label)));
    if ([...select.options].some((option) => option.value === previous)) select.value = previous;
    return select;
  }

  function queueNodes() {
    return row.nodes.map((part) => ({ value: part.node, label: part.node_name + " (" + fmt.n(part.depth) + " waiting)" }));
  }

  function where(node) {
    return node === "*" ? "on every node" : "on " + nodeName(node);
  }

  function waitingOn(node) {
    return node === "*" ? row.depth : (row.nodes.find((part) => part.node === node) || { depth: 0 }).depth;
  }

  // -- admin: purge, move, delete ---------------------------------------------------------------
  // A dialog choosing the node(s) an action applies to; `sentence(scope)` says what it will do.
  function scopeDialog(label, all, sentence) {
    const scope = nodeOptions(el("select"), queueNodes(), { all, value: "*" });
    const text = el("p");
    const describe = () => { text.textContent = sentence(scope.value); };
    scope.addEventListener("change", describe);
    describe();
    return { state: { scope }, body: [el("label", null, label, scope), text] };
  }

  function purgeDialog() {
    return scopeDialog("Purge on", "every node (" + fmt.n(row.depth) + " waiting)", (scope) =>
      "Drops every message waiting in " + name + " " + where(scope) + " (" + fmt.n(waitingOn(scope)) +
      " at the last look). Messages delivered and not yet acknowledged, or in doubt, stay. This cannot be undone.");
  }

  function moveDialog() {
    const from = nodeOptions(el("select"), queueNodes(), { all: "every node (to another queue only)" });
    const mode = el("select", null, el("option", { value: "queue" }, "to another queue on the same node"),
      el("option", { value: "node" }, "to this queue on another node"));
    const toQueue = el("input", { placeholder: "queue name, e.g. " + name + ".retry", required: true });
    const toNode = el("select");
    const count = el("input", { type: "number", min: 1, placeholder: "all" });
    const text = el("p");
    const describe = () => {
      const others = meshNodes.filter((node) => node.id !== from.value && node.state === "up");
      nodeOptions(toNode, others.map((node) => ({ value: node.id, label: node.name })), {});
      const byNode = mode.value === "node";
      if (byNode && from.value === "*") from.value = row.nodes[0].node;
      toQueue.required = !byNode;
      toQueue.closest("label").hidden = byNode;
      toNode.closest("label").hidden = !byNode;
      const how = count.value ? "Up to " + fmt.n(Number(count.value)) : "All";
      text.textContent = how + " of the messages waiting in " + name + " " + where(from.value) + " (" +
        fmt.n(waitingOn(from.value)) + " at the last look) move " + (byNode
        ? "to " + name + " on " + (nodeName(toNode.value) || "another node") + ", each leaving once the peer stored it. " +
          "The node must be linked with " + nodeName(from.value) + "."
        : "to the queue " + (toQueue.value || "…") + " on the same node.");
    };
    [from, mode, toNode].forEach((input) => input.addEventListener("change", describe));
    [toQueue, count].forEach((input) => input.addEventListener("input", describe));
    const body = [el("label", null, "Move from", from), el("label", null, "Where", mode), el("label", null, "Queue", toQueue),
      el("label", null, "Node", toNode), el("label", null, "How many (empty: all)", count), text];
    describe();
    return { state: { from, mode, toQueue, toNode, count }, body };
  }

  function deleteDialog() {
    return scopeDialog("Delete on", "every node", (scope) =>
      "Deletes the queue " + name + " " + where(scope) + " and drops the " + fmt.n(waitingOn(scope)) +
      " messages waiting there. A node refuses while the queue has consumers or messages in doubt on it. " +
      "The queue is made again when used.");
  }

  function wireActions() {
    const results = document.getElementById("results");
    document.getElementById("purge").addEventListener("click", () => {
      const dialog = purgeDialog();
      act(results, () => "Purge " + where(dialog.state.scope.value),
        () => ({ title: "Purge " + name + "?", body: dialog.body, confirm: "Purge", danger: true }),
        () => MG.api(path + "/purge", { method: "POST", body: { node: dialog.state.scope.value } }));
    });
    document.getElementById("move").addEventListener("click", () => {
      const dialog = moveDialog();
      const { from, mode, toQueue, toNode, count } = dialog.state;
      act(results, () => "Move " + where(from.value) + (mode.value === "node" ? " to " + nodeName(toNode.value) : " to " + toQueue.value.trim()),
        () => ({ title: "Move messages of " + name + "?", body: dialog.body, confirm: "Move" }),
        () => MG.api(path + "/move", { method: "POST", body: {
          node: from.value, count: count.value ? Number(count.value) : undefined,
          ...(mode.value === "node" ? { to_node: toNode.value } : { to_queue: toQueue.value.trim() }),
        } }));
    });
    document.getElementById("delete").addEventListener("click", () => {
      const dialog = deleteDialog();
      const scope = () => dialog.state.scope.value;
      act(results, () => "Delete " + where(scope()),
        () => ({ title: "Delete " + name + "?", body: dialog.body, confirm: "Delete", danger: true }),
        () => MG.api(path + "?node=" + encodeURIComponent(scope()), { method: "DELETE" }),
        (answer) => {
          const everywhere = scope() === "*" || (row.nodes.length === 1 && row.nodes[0].node === scope());
          if (answer && everywhere && !answer.failures.length) {
            quietUntil = Date.now() + 5000;
            gone();
            return;
          }
          if (answer && browse.node === scope()) browse.node = null;  // the next read picks another node
          reread();
        });
    });
  }

  // -- admin: browse ------------------------------------------------------------------------------
  const browse = { node: null, offset: 0, limit: 20 };
  const browseNode = document.getElementById("browse-node");
  const browseList = document.getElementById("browse-list");
  const browsePager = document.getElementById("browse-pager");

  function browseOn(node, { scroll = true } = {}) {
    browse.node = node;
    browse.offset = 0;
    browseNode.value = node;
    if (scroll) document.getElementById("browse").scrollIntoView({ behavior: "smooth", block: "start" });
    loadBrowse();
  }

  function headersCell(headers) {
    const keys = Object.keys(headers);
    if (!keys.length) return el("span", { class: "zero" }, "none");
    return el("details", { class: "headers" }, el("summary", null, keys.length + (keys.length === 1 ? " header" : " headers")),
      el("dl", null, keys.map((key) => [el("dt", null, key), el("dd", null, headers[key])])));
  }

  function renderBrowse(page) {
    browsePager.replaceChildren(
      el("span", { class: "muted" }, (page.total ? fmt.n(page.offset + 1) + "–" + fmt.n(page.offset + page.messages.length) +
        " of " + fmt.n(page.total) + " waiting on " + nodeName(page.node) + ", " : "") + "read " + new Date().toLocaleTimeString()),
      el("button", { class: "small", disabled: page.offset <= 0,
        onclick: () => { browse.offset = Math.max(0, browse.offset - browse.limit); loadBrowse(); } }, "‹"),
      el("button", { class: "small", disabled: page.offset + page.messages.length >= page.total,
        onclick: () => { browse.offset += browse.limit; loadBrowse(); } }, "›"),
      el("button", { class: "small", onclick: loadBrowse, title: "read again" }, "Refresh"));
    browseList.replaceChildren(MG.table([
      { label: "#", num: true, value: (m) => fmt.n(page.offset + page.messages.indexOf(m) + 1) },
      { label: "Id", title: "its journey, if it was traced", value: (m) => el("a", { class: "mono message-link",
        href: "/messages/" + encodeURIComponent(m.id) + "/", title: "where it went (if traced)" }, m.id) },
      { label: "Age", num: true, value: (m) => fmt.duration(m.age_ms) },
      { label: "Size", num: true, value: (m) => fmt.bytes(m.size) },
      { label: "Flags", value: (m) => el("span", { class: "note" }, [m.persistent ? "persistent" : "transient",
        m.redelivered ? "redelivered" : null, m.priority !== 4 ? "priority " + m.priority : null].filter(Boolean).join(" · ")) },
      { label: "Headers", value: (m) => headersCell(m.headers) },
      { label: "Body", value: (m) => el("div", { title: "message " + m.id }, m.body || el("span", { class: "zero" }, "(empty)"),
        m.truncated ? el("span", { class: "more" }, " … " + fmt.bytes(m.size) + " in all") : null) },
    ], page.messages, { empty: page.offset ? "No more messages." : "No message waits in " + name + " on " + nodeName(page.node) + "." }));
    browseList.querySelectorAll("tbody td:last-child").forEach((cell) => cell.classList.add("body"));
  }

  async function loadBrowse() {
    if (!browse.node) return;
    browseList.replaceChildren(el("p", { class: "empty" }, "Reading " + name + " on " + nodeName(browse.node) + "…"));
    try {
      const answer = await MG.api(path + "/browse", { method: "POST",
        body: { node: browse.node, offset: browse.offset, limit: browse.limit, preview: 256 } });
      const page = answer.result[0];
      if (page) renderBrowse(page);
      else browseList.replaceChildren(el("p", { class: "result error" }, MG.failureText(answer.failures, names) ||
        "No answer: the queue is not on " + nodeName(browse.node) + " any more."));
    } catch (error) {
      browseList.replaceChildren(el("p", { class: "result error" }, "Could not browse: " + MG.explain(error, names)));
    }
  }

  // -- admin: send --------------------------------------------------------------------------------
  function parseHeaders(text) {
    const headers = {};
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      const colon = line.indexOf(":");
      if (colon < 1) throw new Error("a header line is “name: value”, got “" + line.trim() + "”");
      headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim();
    }
    return headers;
  }

  function wireSend() {
    const form = document.getElementById("send-form");
    const results = document.getElementById("send-results");
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const node = form.elements.node.value;
      const body = form.elements.body.value;
      const persistent = form.elements.persistent.checked;
      let headers;
      try {
        headers = parseHeaders(form.elements.headers.value);
      } catch (error) {
        reportError(results, "Not sent", error);
        return;
      }
      const size = new TextEncoder().encode(body).length;
      const count = Object.keys(headers).length;
      await act(results, () => "Send to " + name + " on " + nodeName(node),
        () => ({ title: "Send a test message?", confirm: "Send", body: el("p", null, "Sends a " +
          (persistent ? "persistent" : "non-persistent") + " message of " + fmt.bytes(size) + " with " + count +
          (count === 1 ? " header" : " headers") + " to /queue/" + name + " on " + nodeName(node) +
          ", as a client of that node would. Consumers receive it like any other message.") }),
        () => MG.api(path + "/send", { method: "POST", body: { node, body, headers, persistent } }));
    });
  }

  function fillSelects() {
    nodeOptions(browseNode, queueNodes(), {});
    if (!browse.node && row.nodes.length) {
      const fullest = [...row.nodes].sort((a, b) => b.depth - a.depth)[0];
      browseOn(fullest.node, { scroll: false });
    }
    const target = document.getElementById("send-form").elements.node;
    const up = meshNodes.filter((node) => node.state === "up");
    nodeOptions(target, up.map((node) => ({ value: node.id, label: node.name })),
      { value: target.value || (row.nodes.length ? row.nodes[0].node : undefined) });
  }

  if (MG.admin) {
    wireActions();
    wireSend();
    browseNode.addEventListener("change", () => { browse.node = browseNode.value; browse.offset = 0; loadBrowse(); });
  }

  load();
  loadNodes();
  const refresh = MG.throttle(load, 2000);
  MG.live(["queues"], {
    queues(update) {
      const mine = update.queues.find((queue) => queue.name === name);
      if (Date.now() < quietUntil) return;
      if (mine) {
        charts.live(Date.now() / 1000, mine.rates);
        refresh();
      } else if (row) {
        gone();  // deleted, or its last node went down
      }
    },
  });
})();
