// Vhost permissions on the Vhosts page: the chosen vhost's entries, one row per entry with
// the nodes that hold it and where it comes from (configuration or command); admins set a
// user's or group's three patterns for every node, or clear one a command set.
"use strict";

(function () {
  const { el } = MG;
  const box = document.getElementById("permissions");
  const choice = document.getElementById("permissions-vhost");
  const results = document.getElementById("permission-results");
  const form = document.getElementById("set-permission");
  const SOURCES = { config: "node configuration", command: "set for the mesh" };

  function report(tone, ...text) {
    results.prepend(el("div", { class: "result " + tone }, ...text, el("span", { class: "note" }, " · " + new Date().toLocaleTimeString())));
    while (results.children.length > 4) results.lastElementChild.remove();
  }

  function url(vhost, kind, who) {
    const base = "vhosts/" + encodeURIComponent(vhost) + "/permissions";
    return kind === undefined ? base : base + (kind === "group" ? "/group/" : "/") + encodeURIComponent(who);
  }

  // Rows per node → one row per entry, with the nodes that hold it alike.
  function grouped(items) {
    const entries = new Map();
    for (const item of items) {
      const key = JSON.stringify([item.user, item.group, item.configure, item.write, item.read, item.source, item.in_force]);
      if (!entries.has(key)) entries.set(key, { ...item, nodes: [] });
      entries.get(key).nodes.push(item.node_name || item.node.slice(0, 8));
    }
    const rows = [...entries.values()];
    rows.forEach((row) => row.nodes.sort());
    return rows;
  }

  const pattern = (text) => el("span", { class: "mono" }, text === "" ? '""' : text);
  const columns = [
    { label: "User or group", value: (row) => row.user !== null
      ? el("span", null, "user ", el("strong", { class: "mono" }, row.user))
      : el("span", null, "group ", el("strong", { class: "mono" }, row.group)) },
    { label: "Configure", value: (row) => pattern(row.configure) },
    { label: "Write", value: (row) => pattern(row.write) },
    { label: "Read", value: (row) => pattern(row.read) },
    { label: "From", value: (row) => el("span", { class: row.in_force ? null : "warn",
      title: row.in_force ? null : "these nodes' configuration has an entry for it, which stands" },
      (SOURCES[row.source] || row.source) + (row.in_force ? "" : " (ignored)")) },
    { label: "Nodes", value: (row) => el("div", { class: "chips" }, row.nodes.map((node) => el("span", {
      class: "chip" + (row.map_active ? " active" : ""),
      title: row.map_active ? "checked there" : "not checked there: the node lets clients in without users" }, node))) },
  ];
  if (MG.admin) {
    columns.push({ label: "", value: (row) => row.source === "command"
      ? el("button", { class: "small", "data-action": "clear", onclick: () => clear(row) }, "Clear…")
      : el("span", { class: "note", title: "edit the nodes' [[vhosts.permissions]]" }, "configured") });
  }

  async function clear(row) {
    const kind = row.user !== null ? "user" : "group";
    const who = row.user !== null ? row.user : row.group;
    const confirmed = await MG.dialog({
      title: "Clear the permissions of " + kind + " " + who + " in vhost " + choice.value + "?",
      confirm: "Clear on every node", danger: true,
      body: el("p", null, "Its next connections to the vhost are refused unless another entry names it " +
        "(its groups'); connections open now are not closed."),
    });
    if (!confirmed) return;
    try {
      await MG.api(url(choice.value, kind, who), { method: "DELETE" });
      report("ok", "Permissions of " + kind + " " + who + " cleared on every node.");
    } catch (error) {
      report("bad", "Permissions of " + kind + " " + who + " not cleared: " + error.message);
    }
    load();
  }

  // The vhosts the table above just listed (vhosts.js says so as it loads, live).
  function vhostNames(items) {
    const chosen = choice.value;
    choice.replaceChildren(...items.map((row) => el("option", { value: row.name }, row.name)));
    if (items.some((row) => row.name === chosen)) choice.value = chosen;
  }

  async function load() {
    try {
      const answer = await MG.api(url(choice.value), { query: { page_size: 500 } });
      box.replaceChildren(MG.table(columns, grouped(answer.items), {
        empty: "No permissions in vhost " + choice.value + ": unless another vhost has some, every user may open it.",
        rowAttributes: (row) => ({ "data-who": (row.user !== null ? "user:" + row.user : "group:" + row.group) }),
      }));
    } catch (error) {
      MG.loadFailed("read the permissions", error, box);
    }
  }

  choice.addEventListener("change", load);
  if (form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const kind = form.elements.kind.value;
      const who = form.elements.who.value;
      if (!who) {
        report("bad", "Give the " + kind + "'s name.");
        return;
      }
      const body = { configure: form.elements.configure.value, write: form.elements.write.value,
        read: form.elements.read.value };
      try {
        const answer = await MG.api(url(choice.value, kind, who), { method: "PUT", body });
        const loud = /NOW ON/.test(answer.result.detail || "");
        report(loud ? "bad" : "ok", "Permissions of " + kind + " " + who + " in vhost " + choice.value +
          " set on every node." + (loud ? " " + answer.result.detail.slice(answer.result.detail.indexOf("VHOST")) : ""));
        form.elements.who.value = "";
      } catch (error) {
        report("bad", "Permissions of " + kind + " " + who + " not set: " + error.message);
      }
      load();
    });
  }

  document.addEventListener("mg:vhosts", (event) => {
    vhostNames(event.detail);
    load();
  });
})();
