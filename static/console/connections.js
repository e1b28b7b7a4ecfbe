// Connections: the client connections of every node (asked afresh through the management
// address), filtered, sorted and paged by the API; admins may close one. An AMQP
// connection's channels show under it when expanded. The list is read again when the
// mesh's count of connections changes.
"use strict";

(function () {
  const { el, fmt } = MG;
  const DEFAULTS = { name: "", sort: "name", reverse: false, page: 1, size: 50 };
  const state = MG.readQuery(DEFAULTS);
  const box = document.getElementById("connections");
  const pagerBox = document.getElementById("pager");
  const totals = document.getElementById("totals");
  const results = document.getElementById("results");
  const filter = document.getElementById("filter");
  const pageSize = document.getElementById("page-size");
  let count = null;  // the mesh's count of connections at the last read
  const expanded = new Set();  // ids of the AMQP connections whose channels show
  let shown = null;  // the answer on screen

  const plural = (count, noun) => fmt.n(count) + " " + noun + (count === 1 ? "" : "s");

  function report(tone, ...text) {
    results.prepend(el("div", { class: "result " + tone }, ...text, el("span", { class: "note" }, " · " + new Date().toLocaleTimeString())));
    while (results.children.length > 4) results.lastElementChild.remove();
  }

  async function closeConnection(connection) {
    const confirmed = await MG.dialog({
      title: "Close connection " + connection.id + "?",
      confirm: "Close connection",
      danger: true,
      body: el("p", null, "Disconnects the client at " + connection.remote + " (user " + connection.user +
        (connection.client_id ? ", client id " + connection.client_id : "") + ") from " + connection.node_name +
        ". It gets an ERROR frame saying an administrator closed it" +
        (connection.unacked ? "; " + plural(connection.unacked, "unacknowledged message") + " will be delivered again" : "") +
        (connection.subscriptions ? "; " + plural(connection.subscriptions, "subscription") + " will end" : "") +
        ". A client that reconnects by itself comes back."),
    });
    if (!confirmed) return;
    try {
      const answer = await MG.api("connections/" + encodeURIComponent(connection.id), { method: "DELETE" });
      const failed = MG.failureText(answer.failures);
      report(failed ? "partial" : "ok", el("strong", null, "Closed " + connection.id), " on " + connection.node_name,
        failed ? " — " + failed : "");
    } catch (error) {
      report("error", el("strong", null, "Could not close " + connection.id), " — " + MG.explain(error, { [connection.node]: connection.node_name }));
    }
    load();
  }

  const columns = [
    { label: "Connection", sort: "name", value: (c) => el("span", { class: "mono" }, c.id) },
    { label: "Node", sort: "node_name", value: (c) => c.node_name },
    ...(MG.vhost === null ? [{ label: "Vhost", title: "the vhost the client chose", value: (c) => el("span", { class: "mono" }, c.vhost) }] : []),
    { label: "Remote", value: (c) => el("span", { class: "mono" }, c.remote) },
    { label: "User", sort: "user", value: (c) => c.user },
    { label: "Client id", value: (c) => c.client_id || el("span", { class: "zero" }, "–") },
    { label: "Protocol", value: (c) => c.protocol + " " + c.version },
    { label: "Connected", sort: "since", value: (c) => el("span", { title: fmt.time(c.since) }, fmt.since(c.since)) },
    { label: "Channels", num: true, title: "AMQP: open channels (click to see them); STOMP has none", value: channelsCell },
    { label: "Subscriptions", num: true, title: "consumers (AMQP: on all its channels)", value: (c) => fmt.n(c.subscriptions) },
    { label: "Unacked", sort: "unacked", num: true, value: (c) => el("span", { class: c.unacked ? null : "zero" }, fmt.n(c.unacked)) },
  ];
  if (MG.admin) {
    columns.push({ label: "", value: (c) => el("button", { class: "small", onclick: () => closeConnection(c) }, "Close…") });
  }

  function channelsCell(c) {
    if (c.protocol !== "amqp") return el("span", { class: "zero", title: "STOMP has no channels" }, "–");
    if (!c.channels) return el("span", { class: "zero" }, "0");
    const open = expanded.has(c.id);
    return el("button", {
      class: "expand", "aria-expanded": String(open), "aria-label": (open ? "hide" : "show") + " the channels of " + c.id,
      title: (open ? "hide" : "show") + " its channels", onclick: () => {
        if (open) expanded.delete(c.id);
        else expanded.add(c.id);
        if (shown) render(shown);
      } }, (open ? "▾ " : "▸ ") + fmt.n(c.channels));
  }

  const yes = (value) => (value ? "yes" : el("span", { class: "zero" }, "no"));
  const limit = (value) => (value ? fmt.n(value) : el("span", { class: "zero", title: "no limit" }, "none"));
  const CHANNEL_COLUMNS = [
    { label: "Channel", num: true, value: (ch) => el("strong", null, ch.number) },
    { label: "Consumers", num: true, value: (ch) => fmt.n(ch.consumers) },
    { label: "Unacked", num: true, title: "deliveries awaiting ack, nack or reject (basic.get ones too)",
      value: (ch) => el("span", { class: ch.unacked ? null : "zero" }, fmt.n(ch.unacked)) },
    { label: "Prefetch", num: true, title: "basic.qos per consumer, for the consumers made next", value: (ch) => limit(ch.prefetch) },
    { label: "Global prefetch", num: true, title: "basic.qos global: the limit the channel's consumers share",
      value: (ch) => limit(ch.global_prefetch) },
    { label: "Confirm", title: "publisher confirms (confirm.select)", value: (ch) => yes(ch.confirm) },
    { label: "Transactional", title: "tx.select", value: (ch) => yes(ch.transactional) },
  ];

  function channels(c) {
    if (c.protocol !== "amqp" || !expanded.has(c.id)) return null;
    return el("div", { class: "channels", "data-connection": c.id },
      MG.table(CHANNEL_COLUMNS, c.channel_details || [], { empty: "No channel is open." }));
  }

  function render(answer) {
    shown = answer;
    totals.textContent = fmt.n(answer.total_count) + (answer.total_count === 1 ? " connection" : " connections") +
      (state.name ? " matching “" + state.name + "”" : "");
    const failed = MG.failureText(answer.failures);
    box.replaceChildren(
      failed ? el("p", { class: "result partial" }, "Not every node answered, so some connections may be missing: " + failed) : "",
      MG.table(columns, answer.items, {
        sort: { field: state.sort, reverse: state.reverse },
        onSort: (next) => change({ sort: next.field, reverse: next.reverse, page: 1 }),
        empty: state.name ? "No connection id contains “" + state.name + "”."
          : "No client is connected to any node. Connect a STOMP or AMQP client to any node and it shows here.",
        rowAttributes: (c) => ({ "data-connection": c.id }),
        detail: channels,
      }));
    pagerBox.replaceChildren(answer.page_count > 1 ? MG.pager(answer, (page) => change({ page })) : "");
  }

  const list = MG.pagedList({
    path: "connections", what: "list the connections", state, defaults: DEFAULTS, filter, pageSize, box, render,
  });
  const { load, change } = list;
  document.getElementById("refresh").addEventListener("click", load);

  load();
  const refresh = MG.throttle(load, 3000);
  MG.live(["mesh"], {
    mesh(update) {
      if (count !== null && update.overview.connections !== count) refresh();
      count = update.overview.connections;
    },
  });
})();
