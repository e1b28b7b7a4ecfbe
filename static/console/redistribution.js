// Redistribution: where messages move between nodes. Forwarding rates per link from the
// "mesh" updates, the queues moving now from the "queues" updates, and redistribution
// events (backlogs following consumers) as they come, summed per direction over 5 minutes.
"use strict";

(function () {
  const { el, fmt } = MG;
  const WINDOW = 300;  // seconds of redistribution events summed per direction
  const FEED_LENGTH = 100;
  const statsBox = document.getElementById("stats");
  const linksBox = document.getElementById("links");
  const pairsBox = document.getElementById("pairs");
  const movingBox = document.getElementById("moving");
  const feed = document.getElementById("feed");
  const feedNote = document.getElementById("feed-note");
  const names = {};  // node id -> name
  let events = [];  // redistribution events of the last WINDOW seconds, newest first
  let mesh = null;  // the last "mesh" update
  let linkSort = { field: "rate", reverse: true };
  let pairSort = { field: "count", reverse: true };

  const nodeName = (id) => names[id] || id.slice(0, 8);
  const queueLink = (name) => el("a", { href: "/queues/" + encodeURIComponent(name) + "/" }, name);

  function rateCell(value) {
    return el("span", { class: value ? null : "zero" }, fmt.rate(value));
  }

  function renderStats() {
    const recent = events.reduce((sum, event) => sum + event.count, 0);
    const links = mesh ? mesh.links : [];
    const rates = mesh ? mesh.overview.rates : { forward: 0, redistribute: 0 };
    statsBox.replaceChildren(
      MG.stat("Forwarding", fmt.rate(rates.forward), { hint: "custody passing over links" }),
      MG.stat("Redistributing", fmt.rate(rates.redistribute), { hint: "backlogs moving now" }),
      MG.stat("Redistributed", fmt.n(recent), { hint: "messages, last 5 minutes" }),
      MG.stat("In flight on links", fmt.n(links.reduce((sum, link) => sum + link.in_flight, 0)), { hint: "not yet stored by the peer" }),
      MG.stat("Link backlog", fmt.n(links.reduce((sum, link) => sum + link.backlog, 0)), { hint: "topic messages waiting for a link" }),
      MG.stat("Links down", fmt.n(links.filter((link) => link.state === "down").length),
        { tone: links.some((link) => link.state === "down") ? "bad" : null }));
  }

  function renderLinks() {
    const links = mesh.links;
    const top = Math.max(1, ...links.map((link) => link.rate));
    linksBox.replaceChildren(MG.table([
      { label: "Link", sort: "name", value: (link) => [link.a_name, el("span", { class: "arrow" }, "⇄"), link.b_name] },
      { label: "State", sort: "state", value: (link) => MG.badge(link.state) },
      { label: "Rate", sort: "rate", num: true, value: (link) => el("span", { class: "flowbar" },
        el("span", { class: "bar", style: "width:" + Math.round(60 * link.rate / top) + "px" }), rateCell(link.rate)) },
      { label: "In flight", sort: "in_flight", num: true, value: (link) => fmt.n(link.in_flight) },
      { label: "Backlog", sort: "backlog", num: true, value: (link) => fmt.n(link.backlog) },
      { label: "Forwarded", sort: "forwarded", num: true, title: "both ways, since the ends started", value: (link) => fmt.n(link.forwarded) },
    ], MG.sortRows(links.map((link) => ({ ...link, name: link.a_name + "–" + link.b_name })), linkSort), {
      sort: linkSort, onSort: (next) => { linkSort = next; renderLinks(); },
      empty: "No links: a single node, or the nodes have not found each other yet.",
    }));
  }

  function renderPairs() {
    const pairs = {};
    for (const event of events) {
      const key = event.source + ">" + event.target;
      const pair = pairs[key] || (pairs[key] = { key, source: event.source, target: event.target, count: 0, events: 0, last: 0, queues: new Set() });
      pair.count += event.count;
      pair.events += 1;
      pair.last = Math.max(pair.last, event.time);
      pair.queues.add(event.queue);
    }
    const rows = Object.values(pairs).map((pair) => ({ ...pair, name: nodeName(pair.source) + nodeName(pair.target) }));
    pairsBox.replaceChildren(MG.table([
      { label: "From → to", sort: "name", value: (pair) => [nodeName(pair.source), el("span", { class: "arrow" }, "→"), nodeName(pair.target)] },
      { label: "Messages", sort: "count", num: true, value: (pair) => el("strong", null, fmt.n(pair.count)) },
      { label: "Per second", num: true, title: "averaged over 5 minutes", value: (pair) => fmt.rate(pair.count / WINDOW) },
      { label: "Last", sort: "last", num: true, value: (pair) => fmt.since(pair.last) },
      { label: "Queues", value: (pair) => el("span", { class: "chips" }, [...pair.queues].sort().slice(0, 4).map((name) =>
        el("span", { class: "chip" }, queueLink(name))), pair.queues.size > 4 ? "+" + (pair.queues.size - 4) : null) },
    ], MG.sortRows(rows, pairSort), {
      sort: pairSort, onSort: (next) => { pairSort = next; renderPairs(); },
      empty: "Nothing redistributed in the last 5 minutes. A backlog moves when the consumers of its queue are on " +
        "another node (after the last local consumer left).",
    }));
  }

  function renderMoving(queues) {
    const moving = queues.filter((queue) => queue.rates.forward > 0 || queue.rates.redistribute > 0)
      .sort((a, b) => (b.rates.forward + b.rates.redistribute) - (a.rates.forward + a.rates.redistribute));
    movingBox.replaceChildren(MG.table([
      { label: "Queue", value: (queue) => queueLink(queue.name) },
      { label: "Forward", num: true, value: (queue) => rateCell(queue.rates.forward) },
      { label: "Redistribute", num: true, value: (queue) => rateCell(queue.rates.redistribute) },
      { label: "Enqueue", num: true, value: (queue) => rateCell(queue.rates.enqueue) },
      { label: "Ack", num: true, value: (queue) => rateCell(queue.rates.ack) },
      { label: "Messages", num: true, value: (queue) => fmt.n(queue.messages) },
      { label: "Where (messages · consumers)", value: (queue) => el("div", { class: "chips" }, queue.nodes.map((part) =>
        el("span", { class: "chip" + (part.consumers ? " active" : "") }, part.node_name, el("strong", null, fmt.n(part.messages)),
          part.consumers ? "· " + fmt.n(part.consumers) + "c" : null))) },
    ], moving, { empty: "No queue is forwarding or redistributing right now." }));
  }

  function feedItem(event, fresh) {
    return el("li", { class: fresh ? "fresh" : null },
      el("time", { title: fmt.time(event.time) }, new Date(event.time * 1000).toLocaleTimeString()),
      el("span", null, el("strong", null, fmt.n(event.count)), event.count === 1 ? " message of " : " messages of ",
        queueLink(event.queue), " moved from ", el("strong", null, nodeName(event.source)), " to ",
        el("strong", null, nodeName(event.target))),
      el("span", { class: "note" }, "reported by " + nodeName(event.node)));
  }

  function renderFeed() {
    feedNote.textContent = events.length ? fmt.n(events.length) + " events in the last 5 minutes" : "";
    if (!events.length) {
      feed.replaceChildren(el("li", { class: "empty" }, "No redistribution in the last 5 minutes; new ones appear here as they happen."));
      return;
    }
    feed.replaceChildren(...events.slice(0, FEED_LENGTH).map((event) => feedItem(event, false)));
  }

  function forget() {
    const from = Date.now() / 1000 - WINDOW;
    events = events.filter((event) => event.time >= from);
  }

  async function load() {
    try {
      const [nodes, answer] = await Promise.all([
        MG.api("nodes", { query: { page_size: 500 } }),
        MG.api("events", { query: { kind: "redistribution", since: Date.now() / 1000 - WINDOW, page_size: 500 } }),
      ]);
      for (const node of nodes.items) names[node.id] = node.name;
      const known = new Set(events.map((event) => event.time + event.node));
      events = events.concat(answer.items.filter((event) => !known.has(event.time + event.node)))
        .sort((a, b) => b.time - a.time);
      MG.problem(null);
      renderPairs();
      renderFeed();
      renderStats();
    } catch (error) {
      MG.loadFailed("read the redistribution events", error, feed);
    }
  }

  load();
  setInterval(() => { forget(); renderPairs(); renderStats(); }, 5000);
  MG.live(["mesh", "queues", "events"], {
    mesh(update) {
      mesh = update;
      for (const node of update.nodes) names[node.id] = node.name;
      renderLinks();
      renderStats();
    },
    queues(update) {
      renderMoving(update.queues);
    },
    event({ event }) {
      if (event.kind !== "redistribution") return;
      events.unshift(event);
      const placeholder = feed.querySelector(".empty");
      if (placeholder) placeholder.remove();
      feed.prepend(feedItem(event, true));
      while (feed.children.length > FEED_LENGTH) feed.lastElementChild.remove();
      feedNote.textContent = fmt.n(events.length) + " events in the last 5 minutes";
      renderPairs();
      renderStats();
    },
  });
})();
