// Queues: every queue of the mesh (the sum of its partial queues) with a part per node,
// filtered, sorted and paged by the API. A "queues" update refreshes the page shown,
// keeping the filter, sort and page (also kept in the URL).
"use strict";

(function () {
  const { el, fmt } = MG;
  const DEFAULTS = { name: "", sort: "name", reverse: false, page: 1, size: 50 };
  const state = MG.readQuery(DEFAULTS);
  const box = document.getElementById("queues");
  const pagerBox = document.getElementById("pager");
  const totals = document.getElementById("totals");
  const filter = document.getElementById("filter");
  const pageSize = document.getElementById("page-size");

  function queueLink(row) {
    return el("a", { href: MG.queueHref(row.name, row.vhost) }, row.name);
  }

  function rateCell(value) {
    return el("span", { class: value ? null : "zero" }, fmt.rate(value));
  }

  function parts(row) {
    return el("div", { class: "chips" }, row.nodes.map((part) => el("span", {
      class: "chip" + (part.consumers ? " active" : ""),
      title: part.node_name + ": " + fmt.n(part.messages) + " messages, " + fmt.n(part.consumers) + " consumers",
    }, part.node_name, el("strong", null, fmt.n(part.messages)), part.consumers ? "· " + fmt.n(part.consumers) + "c" : null)));
  }

  const columns = [
    { label: "Queue", sort: "name", value: queueLink },
    ...(MG.vhost === null ? [{ label: "Vhost", title: "the vhost the queue is in: a queue of the same name in another vhost is another queue",
      value: (row) => el("span", { class: "mono" }, row.vhost) }] : []),
    { label: "Messages", sort: "messages", num: true, title: "waiting, in flight, forwarding and in doubt, over every node",
      value: (row) => el("strong", null, fmt.n(row.messages)) },
    { label: "Per node", sort: "node_count", title: "messages on each node (sort: by how many nodes hold the queue); "
      + "“· 2c”: 2 consumers there", value: parts },
    { label: "Depth", sort: "depth", num: true, title: "waiting", value: (row) => fmt.n(row.depth) },
    { label: "In flight", sort: "in_flight", num: true, title: "delivered, not yet acknowledged", value: (row) => fmt.n(row.in_flight) },
    { label: "Forwarding", sort: "forwarding", num: true, title: "sent over links, not yet stored by the peer", value: (row) => fmt.n(row.forwarding) },
    { label: "In doubt", sort: "in_doubt", num: true,
      value: (row) => el("span", { class: row.in_doubt ? "warn" : null }, fmt.n(row.in_doubt)) },
    { label: "Consumers", sort: "consumers", num: true, value: (row) => fmt.n(row.consumers) },
    { label: "Enqueue", sort: "rates.enqueue", num: true, value: (row) => rateCell(row.rates.enqueue) },
    { label: "Ack", sort: "rates.ack", num: true, value: (row) => rateCell(row.rates.ack) },
    { label: "Forward", sort: "rates.forward", num: true, value: (row) => rateCell(row.rates.forward) },
    { label: "Redistribute", sort: "rates.redistribute", num: true, value: (row) => rateCell(row.rates.redistribute) },
  ];

  function emptyText() {
    if (state.name) return "No queue name contains “" + state.name + "”" + (MG.vhost === null ? "." : " in vhost " + MG.vhost + ".");
    if (MG.vhost !== null) return "No queues in vhost " + MG.vhost + " yet — choose “all vhosts” at the top to see every vhost's.";
    return "No queues yet — send a message to any node (for example to /queue/orders) and its queue appears here " +
      "within a second.";
  }

  function render(answer) {
    totals.textContent = fmt.n(answer.total_count) + (answer.total_count === 1 ? " queue" : " queues") +
      (state.name ? " matching “" + state.name + "”" : "") + (MG.vhost === null ? "" : " in vhost " + MG.vhost);
    box.replaceChildren(MG.table(columns, answer.items, {
      sort: { field: state.sort, reverse: state.reverse },
      onSort: (next) => change({ sort: next.field, reverse: next.reverse, page: 1 }),
      empty: emptyText(),
    }));
    pagerBox.replaceChildren(answer.page_count > 1 ? MG.pager(answer, (page) => change({ page })) : "");
  }

  const list = MG.pagedList({
    path: "queues", what: "read the queues", state, defaults: DEFAULTS, filter, pageSize, box, render,
  });
  const { load, change } = list;

  load();
  const refresh = MG.throttle(load, 1500);
  MG.live(["queues"], { queues: refresh });
})();
