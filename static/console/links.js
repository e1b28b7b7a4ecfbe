// Links: every mesh link with its state, age and traffic, live from the "mesh" updates.
// How each end sees it (who dialled, addresses) comes from the links API, read again when a
// link appears, goes or changes state.
"use strict";

(function () {
  const { el, fmt } = MG;
  const box = document.getElementById("links");
  const summary = document.getElementById("summary");
  let sort = { field: "name", reverse: false };
  let links = [];
  let ends = {};  // link id -> [Link as each end reports it]
  let shape = "";  // the ids and states the ends were read for

  function rateCell(value) {
    return el("span", { class: value ? null : "zero" }, fmt.rate(value));
  }

  function dialler(link) {
    const reports = ends[link.id];
    if (!reports) return el("span", { class: "zero" }, "–");
    const dialled = reports.find((end) => end.dialled);
    const names = { [link.a]: link.a_name, [link.b]: link.b_name };
    const reporters = reports.map((end) => names[end.node] || end.node).join(", ");
    return el("span", { title: "reported by " + reporters + "; addresses " + reports.map((end) => end.address || "–").join(", ") },
      dialled ? names[dialled.node] || dialled.node : "–", reports.length < 2 ? el("span", { class: "warn" }, " · one end reports") : null);
  }

  const columns = [
    { label: "Link", sort: "name", value: (link) => [el("strong", null, link.a_name), el("span", { class: "arrow" }, "⇄"),
      el("strong", null, link.b_name)] },
    { label: "State", sort: "state", value: (link) => MG.badge(link.state) },
    { label: "Since", sort: "since", value: (link) => el("span", { title: "since " + fmt.time(link.since) },
      link.state + " for " + fmt.duration(Math.max(0, Date.now() - link.since * 1000))) },
    { label: "Direction", sort: "direction", title: "duplex: messages both ways; else only from the node that dialled",
      value: (link) => link.direction },
    { label: "Dialled by", value: dialler },
    { label: "Rate", sort: "rate", num: true, title: "messages forwarded per second, both ways", value: (link) => rateCell(link.rate) },
    { label: "In flight", sort: "in_flight", num: true, title: "forwarded, not yet confirmed stored by the peer", value: (link) => fmt.n(link.in_flight) },
    { label: "Backlog", sort: "backlog", num: true, title: "topic messages kept for the peer's subscribers",
      value: (link) => el("span", { class: link.backlog ? "warn" : null }, fmt.n(link.backlog)) },
    { label: "In doubt", sort: "in_doubt", num: true, value: (link) => el("span", { class: link.in_doubt ? "warn" : null }, fmt.n(link.in_doubt)) },
    { label: "Forwarded", sort: "forwarded", num: true, title: "messages whose custody passed, both ways, since the ends started",
      value: (link) => fmt.n(link.forwarded) },
  ];

  function render() {
    const down = links.filter((link) => link.state === "down").length;
    summary.textContent = links.length ? fmt.n(links.length) + " links, " + (down ? fmt.n(down) + " down" : "all up") : "";
    box.replaceChildren(MG.table(columns, MG.sortRows(links.map((link) => ({ ...link, name: link.a_name + "–" + link.b_name })), sort), {
      sort, onSort: (next) => { sort = next; render(); },
      empty: "No links yet: a single node, or the nodes have not found each other (check the mesh's discovery or seeds).",
      rowAttributes: (link) => (link.state === "down" ? { class: "down" } : null),
    }));
  }

  async function loadEnds() {
    try {
      const answer = await MG.api("links", { query: { page_size: 500 } });
      ends = {};
      for (const link of answer.items) ends[link.id] = link.ends;
      if (!links.length) links = answer.items;
      MG.problem(null);
      render();
    } catch (error) {
      MG.loadFailed("read the links", error, box);
    }
  }

  loadEnds();
  MG.live(["mesh"], {
    mesh(update) {
      links = update.links;
      const now = links.map((link) => link.id + link.state).sort().join();
      if (now !== shape) {
        shape = now;
        loadEnds();
      }
      render();
    },
  });
})();
