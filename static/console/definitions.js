// Definitions: the mesh-wide queue settings, durable subscriptions, traced destinations
// (definitions_traces.js) and AMQP exchanges and bindings, as the node asked holds them (GET /api/v1/definitions). Admins define a queue's
// settings in a form (the API's error shows in it when it refuses them) and delete a queue
// definition or a durable subscription, each confirmed first. The lists are read again when
// an event says a definition or a durable subscriber changed, and every 10 s while live
// updates come (AMQP declarations make no event).
"use strict";

(function () {
  const { el, fmt } = MG;
  const DEFAULTS = { name: "", deleted: false };
  const state = MG.readQuery(DEFAULTS);
  const filter = document.getElementById("filter");
  const showDeleted = document.getElementById("show-deleted");
  const readAt = document.getElementById("read-at");
  const queueList = document.getElementById("queue-list");
  const queueCount = document.getElementById("queue-count");
  const durableList = document.getElementById("durable-list");
  const durableCount = document.getElementById("durable-count");
  const exchangeCard = document.getElementById("exchanges");
  const exchangeList = document.getElementById("exchange-list");
  const exchangeCount = document.getElementById("exchange-count");
  const bindingList = document.getElementById("binding-list");
  const NUMBERS = ["max_delivery_attempts", "message_ttl_ms", "max_length"];
  let records = null;  // the definitions as last read; null until read
  let fresh = null;  // the name of a queue to highlight once it shows (just saved)

  const plural = (count, noun) => fmt.n(count) + " " + noun + (count === 1 ? "" : "s");
  const blank = () => el("span", { class: "zero", title: "not set" }, "");
  const mono = (text) => el("span", { class: "mono" }, text);

  // -- reading -------------------------------------------------------------------------------
  async function readAll() {
    const items = [];
    for (let page = 1; ; page += 1) {
      const answer = await MG.api("definitions", { query: { page, page_size: 500 } });
      items.push(...answer.items);
      if (page >= answer.page_count) return items;
    }
  }

  let asked = 0;
  let retry = null;  // after a failed read: the next try, in 10 s whatever else comes
  async function load() {
    const mine = ++asked;
    clearTimeout(retry);
    try {
      const items = await readAll();
      if (mine !== asked) return;
      records = items;
      MG.problem(null);
      readAt.textContent = "read " + new Date().toLocaleTimeString();
      render();
    } catch (error) {
      if (mine !== asked) return;
      failed(error);
      retry = setTimeout(load, 10000);
    }
  }

  // No node could be asked (503), or the console is out of reach: said at the top; the lists
  // read before stay, marked as such, else each list says why it is empty.
  function failed(error) {
    const why = MG.explain(error);
    MG.problem("Could not read the definitions" + (records ? " (the lists below are from " +
      readAt.textContent.replace(/^read /, "") + ")" : "") + ": " + why + ". Trying again every 10 s.");
    if (records) return;
    const text = error.status === 503 ? "Nothing to show: no node of the mesh could be asked for its definitions."
      : "Nothing to show: the console could not read the definitions.";
    for (const box of [queueList, durableList]) box.replaceChildren(el("p", { class: "empty unreachable" }, text));
    traces.failed(text);
  }

  function matches(record) {
    return (state.deleted || !record.deleted) && (!state.name || record.name.toLowerCase().includes(state.name.toLowerCase()));
  }

  function byName(a, b) {
    return a.name.localeCompare(b.name);
  }

  function kind(name) {
    return (records || []).filter((record) => record.kind === name);
  }

  // -- columns shared by every kind -----------------------------------------------------------
  function versionCell(record) {
    const origin = record.origin_name || record.origin.slice(0, 8);
    return el("span", { class: "version", title: "version " + record.version + " (the mesh's clock for changes), " +
      "made on " + origin + " (" + record.origin + ")" }, "v" + record.version, el("span", { class: "muted" }, " · " + origin));
  }

  function changedCell(record) {
    return el("span", { title: fmt.time(record.changed_at) }, fmt.since(record.changed_at));
  }

  // The vhost of each, when every vhost's are shown and some are not of "/".
  const VHOST = { label: "Vhost", title: "the vhost it belongs to", value: (r) => mono(r.in_vhost) };
  const common = () => [
    ...(MG.vhost === null && records && records.some((r) => r.in_vhost !== "/") ? [VHOST] : []),
    { label: "Version", title: "its version, and the node where the change was made", value: versionCell },
    { label: "Changed", value: changedCell },
  ];

  function deletedName(record, content) {
    return record.deleted ? [content, " ", el("span", { class: "state silent" }, "deleted")] : content;
  }

  // -- queue settings --------------------------------------------------------------------------
  function setting(record, field) {
    return record.queue ? record.queue[field] : undefined;
  }

  function declaredByAmqp(record) {
    const settings = record.queue || {};
    return Boolean((settings.amqp_arguments && Object.keys(settings.amqp_arguments).length) ||
      settings.dead_letter_exchange !== undefined || settings.dead_letter_routing_key !== undefined);
  }

  function arguments_(value) {
    if (!value || !Object.keys(value).length) return blank();
    const text = Object.entries(value).map(([key, one]) => key + "=" + JSON.stringify(one)).join(", ");
    return el("span", { class: "mono clip", title: text }, text);
  }

  function queueColumns(rows) {
    const columns = [
      { label: "Queue", value: (r) => deletedName(r, r.deleted ? mono(r.name)
        : el("a", { href: "/queues/" + encodeURIComponent(r.name) + "/", class: "mono" }, r.name)) },
      { label: "Max deliveries", num: true, title: "max_delivery_attempts: deliveries before a message is dead-lettered",
        value: (r) => (setting(r, "max_delivery_attempts") === undefined ? blank() : fmt.n(setting(r, "max_delivery_attempts"))) },
      { label: "Dead-letter queue", title: "dead_letter_queue",
        value: (r) => (setting(r, "dead_letter_queue") === undefined ? blank() : mono(setting(r, "dead_letter_queue"))) },
      { label: "Expiry queue", title: "expiry_queue: where expired messages go (discard: dropped)", value: (r) => {
        const value = setting(r, "expiry_queue");
        if (value === undefined) return blank();
        return value === "" ? el("em", { class: "muted" }, "discard") : mono(value);
      } },
      { label: "Message TTL", num: true, title: "message_ttl_ms: the expiry of messages sent without one", value: (r) => {
        const value = setting(r, "message_ttl_ms");
        return value === undefined ? blank() : el("span", { title: fmt.n(value) + " ms" }, fmt.duration(value));
      } },
      { label: "Max length", num: true, title: "max_length: messages waiting on each node at most",
        value: (r) => (setting(r, "max_length") === undefined ? blank() : fmt.n(setting(r, "max_length"))) },
    ];
    // The settings only AMQP clients give (x-arguments of queue.declare): columns when some queue has them.
    if (rows.some((r) => setting(r, "dead_letter_exchange") !== undefined || setting(r, "dead_letter_routing_key") !== undefined)) {
      columns.push(
        { label: "DL exchange", title: "dead_letter_exchange (AMQP x-dead-letter-exchange)",
          value: (r) => (setting(r, "dead_letter_exchange") === undefined ? blank() : mono(setting(r, "dead_letter_exchange") || "(default)")) },
        { label: "DL routing key", title: "dead_letter_routing_key (AMQP x-dead-letter-routing-key)",
          value: (r) => (setting(r, "dead_letter_routing_key") === undefined ? blank() : mono(setting(r, "dead_letter_routing_key"))) });
    }
    if (rows.some((r) => setting(r, "amqp_arguments"))) {
      columns.push({ label: "AMQP arguments", title: "the x-arguments the queue was declared with",
        value: (r) => arguments_(setting(r, "amqp_arguments")) });
    }
    columns.push(...common());
    if (MG.admin) columns.push({ label: "", value: queueButtons });
    return columns;
  }

  function queueButtons(record) {
    if (record.deleted) return "";
    const amqp = declaredByAmqp(record);
    return el("span", { class: "buttons" },
      el("button", { class: "small", disabled: amqp, "data-action": "edit",
        title: amqp ? "declared by an AMQP client with x-arguments: saving here would drop them, and its next " +
          "declaration would then be refused. Delete the definition and declare the queue again to change them." : null,
        onclick: () => openForm(record) }, "Edit…"),
      el("button", { class: "small", "data-action": "delete", onclick: () => deleteQueue(record) }, "Delete…"));
  }

  function renderQueues() {
    const all = kind("queue");
    const rows = all.filter(matches).sort(byName);
    const live = all.filter((r) => !r.deleted).length;
    queueCount.textContent = plural(live, "queue") + " with settings" + (all.length > live ? " · " +
      plural(all.length - live, "deletion") + " kept" : "");
    let empty;
    if (!live && !state.name) {
      empty = el("div", { class: "empty" }, el("strong", null, "No queue settings defined"), " — queues use the node " +
        "defaults (the [broker] table of each node's configuration).",
        el("br"), MG.admin ? "Define settings for a queue with “Define queue settings…”, or with meshgate define-queue."
          : "An administrator defines them here, or with meshgate define-queue.");
    } else {
      empty = state.name ? "No queue settings for a name containing “" + state.name + "”." : "No queue settings to show.";
    }
    queueList.replaceChildren(rows.length ? MG.table(queueColumns(rows), rows, {
      rowAttributes: (r) => ({ "data-name": r.name, class: [r.deleted && "deleted", r.name === fresh && "fresh",
        editing && !form.hidden && !r.deleted && r.name === editing.name && "editing"].filter(Boolean).join(" ") || null }),
    }) : (typeof empty === "string" ? el("p", { class: "empty" }, empty) : empty));
    if (rows.some((r) => r.name === fresh)) fresh = null;
  }

  // -- durable subscriptions -------------------------------------------------------------------
  function subscriberCell(record) {
    if (record.deleted) return "";
    const subscribers = record.subscribers || [];
    if (!subscribers.length) {
      return el("span", { class: "muted", title: "no subscriber is attached: its messages wait" }, "away");
    }
    return el("span", { class: "chips" }, subscribers.map((one) => el("span", { class: "chip active",
      title: "connection " + (one.connection || "?") + " on " + one.node_name }, "connected on ",
    el("strong", null, one.node_name), one.connection ? el("span", { class: "mono" }, " " + one.connection) : null)));
  }

  function durableColumns() {
    const columns = [
      { label: "Subscription", title: "client-id.subscription-name", value: (r) => deletedName(r, mono(r.name)) },
      { label: "Topic", value: (r) => (r.durable ? mono("/topic/" + r.durable.topic) : blank()) },
      { label: "Selector", value: (r) => (r.durable && r.durable.selector ? mono(r.durable.selector) : blank()) },
      { label: "Subscriber", title: "where a subscriber is attached now (from the nodes' latest snapshots)", value: subscriberCell },
      { label: "Waiting", num: true, title: "its messages waiting, over every node",
        value: (r) => (r.deleted ? "" : el("span", { class: r.waiting ? null : "zero" }, fmt.n(r.waiting || 0))) },
      ...common(),
    ];
    if (MG.admin) {
      columns.push({ label: "", value: (r) => (r.deleted ? "" : el("button", { class: "small", "data-action": "delete",
        onclick: () => deleteDurable(r) }, "Delete…")) });
    }
    return columns;
  }

  function renderDurables() {
    const all = kind("durable");
    const rows = all.filter(matches).sort(byName);
    const live = all.filter((r) => !r.deleted);
    const connected = live.filter((r) => (r.subscribers || []).length).length;
    durableCount.textContent = plural(live.length, "subscription") + (live.length ? " · " + fmt.n(connected) + " connected" : "");
    const empty = state.name ? "No durable subscription name contains “" + state.name + "”."
      : "No durable subscriptions. A STOMP client makes one by subscribing to a topic with a client-id and " +
        "activemq.subscriptionName (or durable:true and an id); it is then held by every node.";
    durableList.replaceChildren(MG.table(durableColumns(), rows, {
      empty, rowAttributes: (r) => ({ "data-name": r.name, class: r.deleted ? "deleted" : null }),
    }));
  }

  // -- exchanges and bindings (read only: AMQP changes them) ------------------------------------
  function yes(value) {
    return value ? "yes" : el("span", { class: "zero" }, "no");
  }

  // An exchange as declared: the API leaves out what is as by default (durable, not auto-delete…).
  function exchangeSpec(record) {
    return record.exchange ? { durable: true, auto_delete: false, internal: false, arguments: {}, ...record.exchange } : null;
  }

  function renderExchanges() {
    const exchanges = kind("exchange").filter(matches).sort(byName).map((r) => ({ ...r, spec: exchangeSpec(r) }));
    const bindings = kind("binding").filter((r) => state.deleted || !r.deleted);
    const shown = bindings.filter((r) => !state.name || [bindingSpec(r).source, bindingSpec(r).destination]
      .some((name) => String(name).toLowerCase().includes(state.name.toLowerCase())));
    exchangeCard.hidden = !kind("exchange").length && !kind("binding").length;
    if (exchangeCard.hidden) return;
    exchangeCount.textContent = plural(kind("exchange").filter((r) => !r.deleted).length, "exchange") + " · " +
      plural(kind("binding").filter((r) => !r.deleted).length, "binding");
    exchangeList.replaceChildren(MG.table([
      { label: "Exchange", value: (r) => deletedName(r, mono(r.name)) },
      { label: "Type", value: (r) => (r.spec ? r.spec.type : "") },
      { label: "Durable", value: (r) => (r.spec ? yes(r.spec.durable) : "") },
      { label: "Auto-delete", value: (r) => (r.spec ? yes(r.spec.auto_delete) : "") },
      { label: "Internal", value: (r) => (r.spec ? yes(r.spec.internal) : "") },
      { label: "Arguments", value: (r) => arguments_(r.spec && r.spec.arguments) },
      ...common(),
    ], exchanges, { empty: "No exchange to show.", rowAttributes: (r) => ({ "data-name": r.name }) }));
    bindingList.replaceChildren(MG.table([
      { label: "From exchange", value: (r) => deletedName(r, mono(r.spec.source || "(default)")) },
      { label: "To", value: (r) => [el("span", { class: "muted" }, r.spec.destination_kind), " ", mono(r.spec.destination)] },
      { label: "Routing key", value: (r) => (r.spec.routing_key ? mono(r.spec.routing_key) : blank()) },
      { label: "Arguments", value: (r) => arguments_(r.spec.arguments) },
      ...common(),
    ], shown.map((r) => ({ ...r, spec: bindingSpec(r) })).sort((a, b) =>
      (a.spec.source + " " + a.spec.destination).localeCompare(b.spec.source + " " + b.spec.destination)),
    { empty: "No binding to show." }));
  }

  // A binding's route; a deletion has none but its name, which lists the same (model BindingSpec.key).
  function bindingSpec(record) {
    if (record.binding) return { destination_kind: "queue", routing_key: "", arguments: {}, ...record.binding };
    try {
      const [source, kindName, destination, key, args] = JSON.parse(record.name);
      return { source, destination_kind: kindName, destination, routing_key: key, arguments: Object.fromEntries(args || []) };
    } catch (error) {
      return { source: record.name, destination_kind: "", destination: "", routing_key: "", arguments: {} };
    }
  }

  function render() {
    renderQueues();
    renderDurables();
    const all = kind("trace");
    traces.render(all, all.filter(matches).sort(byName), state.name);
    renderExchanges();
  }

  // -- admin: results of actions ------------------------------------------------------------------
  function report(box, tone, ...text) {
    box.prepend(el("div", { class: "result " + tone }, ...text,
      el("span", { class: "note" }, " · " + new Date().toLocaleTimeString())));
    while (box.children.length > 4) box.lastElementChild.remove();
  }

  function done(answer) {
    return answer.result && answer.result.detail ? " (" + answer.result.detail + ")" : "";
  }

  // -- admin: the queue settings form -------------------------------------------------------------
  const form = document.getElementById("queue-form");
  const formError = document.getElementById("form-error");
  const formHint = document.getElementById("form-hint");
  const queueResults = document.getElementById("queue-results");
  const durableResults = document.getElementById("durable-results");
  let editing = null;  // the record the form edits; null: a new queue's settings

  // The API's error in a form ``box`` under ``title``, with the inputs it names marked
  // ("message_ttl_ms: …; max_length: …"): ``inputOf`` maps an API field to the form's input
  // name, and a message matching ``named.pattern`` marks the ``named.input`` it is about.
  function formErrors(form, box, title, inputOf, named) {
    return {
      clear() {
        box.hidden = true;
        box.textContent = "";
        form.querySelectorAll("[aria-invalid]").forEach((input) => input.removeAttribute("aria-invalid"));
      },
      show(error) {
        box.hidden = false;
        box.replaceChildren(el("strong", null, title), " — ", MG.explain(error));
        const message = error && error.message ? error.message : "";
        for (const part of message.split("; ")) {
          const input = form.elements[inputOf(part.split(":")[0].trim())];
          if (input && input.nodeName) input.setAttribute("aria-invalid", "true");
        }
        if (named.pattern.test(message)) form.elements[named.input].setAttribute("aria-invalid", "true");
      },
    };
  }

  const queueFormErrors = formErrors(form, formError, "Not saved", (field) => field,
    { pattern: /queue name|service address/, input: "queue" });
  const clearError = queueFormErrors.clear;
  const showError = queueFormErrors.show;

  function expiryModeChanged() {
    const input = form.elements.expiry_queue;
    input.disabled = form.elements.expiry_mode.value !== "queue";
    if (!input.disabled && !input.value) input.focus();
  }

  function describeName() {
    const name = form.elements.queue.value.trim();
    const existing = !editing && kind("queue").find((r) => r.name === name && !r.deleted);
    formHint.textContent = editing ? "Editing " + editing.name + " (version " + editing.version + ")"
      : existing ? name + " has settings already: saving replaces them." : "";
  }

  function openForm(record) {
    editing = record || null;
    clearError();
    form.reset();
    const settings = (record && record.queue) || {};
    form.elements.queue.value = record ? record.name : "";
    form.elements.queue.readOnly = Boolean(record);
    for (const field of [...NUMBERS, "dead_letter_queue"]) {
      form.elements[field].value = settings[field] === undefined ? "" : String(settings[field]);
    }
    form.elements.expiry_mode.value = settings.expiry_queue === undefined ? "default"
      : settings.expiry_queue === "" ? "discard" : "queue";
    form.elements.expiry_queue.value = settings.expiry_queue || "";
    form.elements.expiry_queue.disabled = form.elements.expiry_mode.value !== "queue";
    document.getElementById("queue-form-title").textContent = record ? "Settings of " + record.name : "Define queue settings";
    describeName();
    form.hidden = false;
    if (records) renderQueues();
    form.scrollIntoView({ block: "nearest" });
    (record ? form.elements.max_delivery_attempts : form.elements.queue).focus();
  }

  function closeForm() {
    form.hidden = true;
    editing = null;
    clearError();
    if (records) renderQueues();
  }

  // The form's settings as the API takes them: blank ones left out (the node's default); a
  // number field holding something else is sent as typed, for the API to say what is wrong.
  function formSettings() {
    const body = {};
    for (const field of NUMBERS) {
      const text = form.elements[field].value.trim();
      if (text) body[field] = /^-?\d+$/.test(text) ? Number(text) : text;
    }
    const deadLetter = form.elements.dead_letter_queue.value.trim();
    if (deadLetter) body.dead_letter_queue = deadLetter;
    const mode = form.elements.expiry_mode.value;
    if (mode === "discard") body.expiry_queue = "";
    if (mode === "queue") body.expiry_queue = form.elements.expiry_queue.value.trim();
    return body;
  }

  async function save(event) {
    event.preventDefault();
    clearError();
    const name = form.elements.queue.value.trim();
    if (!name) {
      form.elements.queue.setAttribute("aria-invalid", "true");
      showError(new Error("give the queue's name"));
      return;
    }
    const body = formSettings();
    if (body.expiry_queue === "" && form.elements.expiry_mode.value === "queue") {
      form.elements.expiry_queue.setAttribute("aria-invalid", "true");
      showError(new Error("name the queue expired messages move to, or choose “discard them”"));
      return;
    }
    const button = document.getElementById("form-save");
    button.disabled = true;
    try {
      const answer = await MG.api("definitions/queues/" + encodeURIComponent(name), { method: "PUT", body });
      closeForm();
      fresh = name;
      report(queueResults, "ok", el("strong", null, "Saved the settings of " + name), " for every node" + done(answer));
      load();
    } catch (error) {
      showError(error);
    } finally {
      button.disabled = false;
    }
  }

  // -- admin: deleting ----------------------------------------------------------------------------
  async function waitingIn(name) {
    try {
      return (await MG.api("queues/" + encodeURIComponent(name))).messages;
    } catch (error) {
      return error.status === 404 ? 0 : null;
    }
  }

  async function deleteQueue(record) {
    const messages = await waitingIn(record.name);
    const confirmed = await MG.dialog({
      title: "Delete the settings of " + record.name + "?",
      confirm: "Delete definition",
      danger: true,
      body: el("p", null, "Deletes the definition of " + record.name + " on every node: its settings, and on each " +
        "node the queue itself with the messages waiting in it" + (messages === null ? "" : " (" +
        plural(messages, "message") + " over the mesh at the last look)") + " — except where a consumer holds the " +
        "queue: there it stays, with the node defaults. This cannot be undone."),
    });
    if (!confirmed) return;
    try {
      const answer = await MG.api("definitions/queues/" + encodeURIComponent(record.name),
        { method: "DELETE", query: { vhost: record.in_vhost } });
      report(queueResults, "ok", el("strong", null, "Deleted the definition of " + record.name), " on every node" + done(answer));
    } catch (error) {
      report(queueResults, "error", el("strong", null, "Could not delete the definition of " + record.name),
        " — " + MG.explain(error));
    }
    load();
  }

  async function deleteDurable(record) {
    const where = (record.subscribers || []).map((one) => one.node_name);
    const confirmed = await MG.dialog({
      title: "Delete the durable subscription " + record.name + "?",
      confirm: "Delete subscription",
      danger: true,
      body: [el("p", null, "Deletes " + record.name + " (" + (record.durable ? "/topic/" + record.durable.topic : "") +
        ") on every node, with every node's part of its messages (" + plural(record.waiting || 0, "message") +
        " waiting at the last look). This cannot be undone."),
      where.length ? el("p", { class: "warn" }, "A subscriber is connected on " + where.join(", ") + ": the nodes " +
        "refuse while it is; it unsubscribes itself.") : null],
    });
    if (!confirmed) return;
    try {
      const answer = await MG.api("definitions/durable/" + encodeURIComponent(record.name),
        { method: "DELETE", query: { vhost: record.in_vhost } });
      report(durableResults, "ok", el("strong", null, "Deleted " + record.name), " on every node" + done(answer));
    } catch (error) {
      report(durableResults, "error", el("strong", null, "Could not delete " + record.name), " — " + MG.explain(error));
    }
    load();
  }

  const traces = MG.traceSection({ common, deletedName, plural, report, done, formErrors, reload: load });

  // -- wiring -------------------------------------------------------------------------------------
  filter.value = state.name;
  showDeleted.checked = state.deleted;
  filter.addEventListener("input", MG.debounce(() => {
    state.name = filter.value.trim();
    MG.writeQuery(state, DEFAULTS);
    if (records) render();
  }, 200));
  showDeleted.addEventListener("change", () => {
    state.deleted = showDeleted.checked;
    MG.writeQuery(state, DEFAULTS);
    if (records) render();
  });
  if (MG.admin) {
    document.getElementById("new-queue").addEventListener("click", () => openForm(null));
    document.getElementById("form-cancel").addEventListener("click", closeForm);
    form.addEventListener("submit", save);
    form.elements.expiry_mode.addEventListener("change", expiryModeChanged);
    form.elements.queue.addEventListener("input", describeName);
  }

  // Live: at once (at most once a second) when an event says a definition changed or a durable
  // subscriber came or went — and once more 2 s later, when the nodes' snapshots tell where
  // it is; besides, every 10 s while live updates come.
  const DEFINING = new Set(["define_queue", "delete_definition", "define_trace"]);
  const soon = MG.throttle(load, 1000);
  const settled = MG.debounce(load, 2000);
  const poll = MG.throttle(load, 10000);
  poll();  // the first read, which the 10 s count from
  MG.live(["mesh", "events"], {
    mesh: poll,
    event(update) {
      const event = update.event;
      if (event.kind === "admin_action" && DEFINING.has(event.action)) {
        soon();
      } else if ((event.kind === "consumer_attached" || event.kind === "consumer_detached") &&
                 event.destination.startsWith("/topic/")) {
        soon();
        settled();
      }
    },
  });
})();
