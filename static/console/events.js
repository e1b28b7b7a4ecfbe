// Events: what the nodes saw, newest first, filtered by kind, node and text and paged by
// the API. New events that match the filters appear on top while page 1 is shown.
"use strict";

(function () {
  const { el, fmt } = MG;
  const KINDS = {  // kind -> tone of its badge
    node_joined: "good", node_left: "bad", node_leaving: "warn", link_up: "good", link_down: "bad",
    redistribution: "", scale_down: "warn", dead_letter: "warn", expiry: "warn", consumer_attached: "",
    consumer_detached: "", authentication_failed: "bad", admin_action: "admin", certificate_expiring: "warn",
    producers_blocked: "warn", producers_resumed: "good",
  };
  const DEFAULTS = { kind: [], node: "", q: "", page: 1, size: 50 };
  const state = MG.readQuery(DEFAULTS);
  const box = document.getElementById("events");
  const pagerBox = document.getElementById("pager");
  const totals = document.getElementById("totals");
  const news = document.getElementById("news");
  const kindsBox = document.getElementById("kinds");
  const text = document.getElementById("text");
  const nodeSelect = document.getElementById("node");
  const pageSize = document.getElementById("page-size");
  const names = {};  // node id -> name
  let shown = null;  // the page on screen
  let unseen = 0;  // new matching events while not on page 1

  const nodeName = (id) => names[id] || (id ? id.slice(0, 8) : "–");
  const strong = (value) => el("strong", null, value);
  const queueLink = (name) => el("a", { href: "/queues/" + encodeURIComponent(name) + "/" }, name);
  const destination = (value) => (value.startsWith("/queue/") ? queueLink(value.slice(7)) : el("span", { class: "mono" }, value));
  const messages = (count) => [strong(fmt.n(count)), count === 1 ? " message" : " messages"];

  const DESCRIBE = {
    node_joined: (e) => ["node ", strong(e.name), " joined the mesh"],
    node_left: (e) => ["node ", strong(e.name), " left the mesh: ", e.reason],
    node_leaving: (e) => ["node ", strong(e.name), " is leaving (scaling down)"],
    link_up: (e) => ["link to ", strong(e.peer_name), " up (", e.dialled ? "dialled" : "accepted", ")"],
    link_down: (e) => ["link to ", strong(e.peer_name), " down: ", e.reason],
    redistribution: (e) => [...messages(e.count), " of ", queueLink(e.queue), " moved from ", strong(nodeName(e.source)),
      " to ", strong(nodeName(e.target))],
    scale_down: (e) => ["handed its messages to ", strong(e.target ? nodeName(e.target) : "no node"), " before leaving; ",
      fmt.n(e.left), " stayed behind"],
    dead_letter: (e) => [...messages(e.count), " of ", queueLink(e.queue), " dead-lettered to ", queueLink(e.dead_letter_queue),
      " (", e.reason, ")"],
    expiry: (e) => [...messages(e.count), " of ", queueLink(e.queue), " expired"],
    consumer_attached: (e) => ["consumer of ", destination(e.destination), " attached on connection ",
      el("span", { class: "mono" }, e.connection), "; ", fmt.n(e.consumers), " here now"],
    consumer_detached: (e) => ["consumer of ", destination(e.destination), " left, connection ",
      el("span", { class: "mono" }, e.connection), "; ", fmt.n(e.consumers), " here now"],
    authentication_failed: (e) => ["sign-in failed for ", strong(e.user || "(no user name)"), " from ",
      el("span", { class: "mono" }, e.remote)],
    admin_action: (e) => [strong(e.user), " ran ", el("span", { class: "mono" }, e.action), " on ",
      el("span", { class: "mono" }, e.target), " — ", el("span", { class: e.ok ? "good" : "bad" }, e.ok ? "done" : "refused"),
      e.result ? ": " + e.result : ""],
    producers_blocked: (e) => ["producers of persistent messages wait: ", e.reason],
    producers_resumed: (e) => ["producers of persistent messages resumed after ", strong(fmt.duration(e.blocked_s * 1000))],
    // How long it had left when the node saw it, which stays true as the page ages.
    certificate_expiring: (e) => [strong(e.listener), " certificate ", el("span", { class: "mono", title: e.subject }, e.subject),
      " ", el("span", { class: e.not_after > e.time ? "warn" : "bad", title: fmt.time(e.not_after) },
        (e.not_after > e.time ? "expires " : "expired ") + fmt.date(e.not_after) +
        (e.not_after > e.time ? " (in " + fmt.until(e.not_after, e.time) + ")" : ""))],
  };

  function when(event) {
    const date = new Date(event.time * 1000);
    const today = date.toDateString() === new Date().toDateString();
    return el("span", { title: fmt.time(event.time) + " (" + fmt.since(event.time) + ")" },
      today ? date.toLocaleTimeString() : date.toLocaleString());
  }

  const columns = [
    { label: "Time", value: when },
    { label: "Node", title: "the node that saw it", value: (event) => nodeName(event.node) },
    { label: "Kind", value: (event) => el("span", { class: "kind " + (KINDS[event.kind] || "") }, event.kind) },
    { label: "What happened", value: (event) => el("span", null, (DESCRIBE[event.kind] || (() => JSON.stringify(event)))(event)) },
  ];

  function filtered() {
    return state.kind.length || state.node || state.q;
  }

  function matches(event) {
    if (state.kind.length && !state.kind.includes(event.kind)) return false;
    if (state.node && event.node !== state.node && names[event.node] !== state.node) return false;
    return !state.q || JSON.stringify(event).toLowerCase().includes(state.q.toLowerCase());
  }

  function renderTotals() {
    totals.textContent = fmt.n(shown.total_count) + (shown.total_count === 1 ? " event" : " events") + (filtered() ? " matching" : "");
  }

  function render(answer) {
    shown = answer;
    renderTotals();
    box.replaceChildren(MG.table(columns, answer.items, {
      empty: filtered() ? "No event matches these filters." : "No events yet: the nodes record links, consumers, " +
        "redistribution, dead letters and admin actions here as they happen.",
      rowAttributes: (event) => (event.kind === "admin_action" && !event.ok ? { class: "down" } : null),
    }));
    pagerBox.replaceChildren(answer.page_count > 1 ? MG.pager(answer, (page) => change({ page })) : "");
  }

  function renderNews() {
    news.replaceChildren(unseen ? el("p", { class: "result partial" }, fmt.n(unseen) + (unseen === 1 ? " new event" : " new events") +
      " since this page was read. ", el("a", { href: "#", onclick: (event) => { event.preventDefault(); change({ page: 1 }); } },
      "Show the newest")) : "");
  }

  function renderKinds() {
    kindsBox.replaceChildren(
      el("button", { class: "chip", "aria-pressed": String(!state.kind.length), onclick: () => change({ kind: [], page: 1 }) }, "all"),
      ...Object.keys(KINDS).map((kind) => el("button", {
        class: "chip", "aria-pressed": String(state.kind.includes(kind)),
        onclick: () => change({ page: 1, kind: state.kind.includes(kind) ? state.kind.filter((k) => k !== kind) : [...state.kind, kind] }),
      }, kind)));
  }

  const { load, change } = MG.pagedLoader({
    path: "events", what: "read the events", state, defaults: DEFAULTS, box, changed: renderKinds,
    query: () => ({ kind: state.kind, node: state.node, q: state.q, page: state.page, page_size: state.size }),
    render: (answer) => {
      unseen = 0;
      renderNews();
      render(answer);
    },
  });

  async function loadNodes() {
    try {
      const nodes = (await MG.api("nodes", { query: { page_size: 500 } })).items;
      for (const node of nodes) names[node.id] = node.name;
      nodeSelect.replaceChildren(el("option", { value: "" }, "every node"),
        ...nodes.map((node) => el("option", { value: node.name }, node.name)));
      nodeSelect.value = state.node;
      if (shown) render(shown);  // node names instead of ids
    } catch (error) {
      MG.loadFailed("list the nodes", error);
    }
  }

  function arrived(event) {
    if (!shown || !matches(event)) return;
    if (state.page !== 1) {
      unseen += 1;
      renderNews();
      return;
    }
    shown.total_count += 1;
    shown.items = [event, ...shown.items].slice(0, state.size);
    const body = box.querySelector("tbody");
    if (!body) {
      render(shown);
      return;
    }
    renderTotals();
    body.prepend(MG.tableRow(columns, event, { class: "fresh" }));
    while (body.children.length > state.size) body.lastElementChild.remove();
  }

  text.value = state.q;
  pageSize.value = String(state.size);
  text.addEventListener("input", MG.debounce(() => change({ q: text.value.trim(), page: 1 }), 300));
  nodeSelect.addEventListener("change", () => change({ node: nodeSelect.value, page: 1 }));
  pageSize.addEventListener("change", () => change({ size: Number(pageSize.value), page: 1 }));

  renderKinds();
  loadNodes().then(load);
  MG.live(["events"], { event: (message) => arrived(message.event) });
})();
