// Vhosts: every vhost of the mesh with what it holds, summed over the nodes and per node;
// admins add one for every node, or delete one made that way (with its messages only
// when they say so: "force").
"use strict";

(function () {
  const { el, fmt } = MG;
  const box = document.getElementById("vhosts");
  const totals = document.getElementById("totals");
  const results = document.getElementById("results");
  const form = document.getElementById("add-vhost");
  const plural = (count, noun) => fmt.n(count) + " " + noun + (count === 1 ? "" : "s");
  const ORIGINS = { default: "built in", config: "node configuration", definition: "added for the mesh",
    stored: "messages kept, vhost gone" };

  function report(tone, ...text) {
    results.prepend(el("div", { class: "result " + tone }, ...text, el("span", { class: "note" }, " · " + new Date().toLocaleTimeString())));
    while (results.children.length > 4) results.lastElementChild.remove();
  }

  function parts(row) {
    return el("div", { class: "chips" }, row.nodes.map((part) => el("span", {
      class: "chip" + (part.connections ? " active" : ""),
      title: part.node_name + ": " + plural(part.queues, "queue") + ", " + plural(part.messages, "message") + ", " +
        plural(part.connections, "connection") + " (" + (ORIGINS[part.origin] || part.origin) + ")",
    }, part.node_name, el("strong", null, fmt.n(part.messages)))));
  }

  function deletable(row) {
    return row.name !== "/" && row.origin.split(", ").includes("definition");
  }

  async function remove(row) {
    const force = el("input", { type: "checkbox", name: "force" });
    const confirmed = await MG.dialog({
      title: "Delete vhost " + row.name + "?",
      confirm: "Delete vhost",
      danger: true,
      body: el("div", null,
        el("p", null, "Deletes it on every node: its " + plural(row.connections, "client connection") +
          " are disconnected and its " + plural(row.queues, "queue") + " go."),
        el("label", { class: "check" }, force, " Force: delete it even while it holds messages, and drop them " +
          "for good (" + plural(row.messages, "message") + " now). Without force, a vhost that holds messages is " +
          "not deleted, and the console says where they are.")),
    });
    if (!confirmed) return;
    try {
      const answer = await MG.api("vhosts/" + encodeURIComponent(row.name), { method: "DELETE",
        query: force.checked ? { force: "true" } : {} });
      report("ok", "Vhost " + row.name + " deleted" + (answer.result.count ? ", " + plural(answer.result.count, "message") + " dropped" : "") + ".");
    } catch (error) {
      report("bad", "Vhost " + row.name + " not deleted: " + error.message);
    }
    load();
  }

  const columns = [
    { label: "Vhost", sort: "name", value: (row) => el("a", { href: "/queues/?vhost=" + encodeURIComponent(row.name),
      title: "its queues" }, el("span", { class: "mono" }, row.name)) },
    { label: "From", sort: "origin", title: "where the nodes have it from", value: (row) =>
      row.origin.split(", ").map((origin) => ORIGINS[origin] || origin).join(", ") },
    { label: "Queues", sort: "queues", num: true, value: (row) => fmt.n(row.queues) },
    { label: "Messages", sort: "messages", num: true, title: "waiting in its queues and durable subscriptions, over every node",
      value: (row) => el("strong", null, fmt.n(row.messages)) },
    { label: "Connections", sort: "connections", num: true, value: (row) => fmt.n(row.connections) },
    { label: "Per node", sort: "node_count", title: "messages on each node (hover: queues and connections)", value: parts },
  ];
  if (MG.admin) {
    columns.push({ label: "", value: (row) => (deletable(row)
      ? el("button", { class: "small", "data-action": "delete", onclick: () => remove(row) }, "Delete…")
      : el("span", { class: "note", title: row.name === "/" ? "the default vhost always exists"
        : "remove it from the nodes' configuration" }, row.name === "/" ? "default" : "configured")) });
  }
  let sort = { field: "name", reverse: false };

  async function load() {
    try {
      const answer = await MG.api("vhosts", { query: { page_size: 500, sort: sort.field, sort_reverse: sort.reverse } });
      MG.problem(answer.failures.length ? MG.failureText(answer.failures) : null);
      totals.textContent = plural(answer.total_count, "vhost");
      box.replaceChildren(MG.table(columns, answer.items, {
        sort, onSort: (next) => { sort = next; load(); }, empty: "No node answered.",
        rowAttributes: (row) => ({ "data-vhost": row.name }),
      }));
      // The permissions below (vhost_permissions.js) follow the same list, without asking again.
      document.dispatchEvent(new CustomEvent("mg:vhosts", { detail: answer.items }));
    } catch (error) {
      MG.loadFailed("read the vhosts", error, box);
    }
  }

  if (form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const name = form.elements.name.value;
      if (!name) {
        report("bad", "Give the new vhost a name.");
        return;
      }
      const body = { name };
      if (form.elements.description.value) body.description = form.elements.description.value;
      try {
        const answer = await MG.api("vhosts", { method: "POST", body });
        const existed = /exists/.test(answer.result.detail || "");  // adding one that exists changes nothing
        report("ok", "Vhost " + name + (existed ? " exists already: nothing changed." : " added on every node."));
        form.reset();
      } catch (error) {
        report("bad", "Vhost " + name + " not added: " + error.message);
      }
      load();
    });
  }

  load();
  MG.live(["mesh"], { mesh: MG.throttle(load, 3000) });
})();
