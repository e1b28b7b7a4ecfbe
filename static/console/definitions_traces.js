// Definitions: the traced destinations (definitions of kind "trace", docs/journeys.md "Tracing
// a destination for a while"), a section of the page definitions.js draws: a row per trace —
// destination, rate, end, who turned it on — and for admins a form that turns one on
// (PUT definitions/traces/<queue|topic>/NAME with rate and for_s; the API's error shows in the
// form) and Stop on each row (DELETE, confirmed first). definitions.js reads the definitions
// and calls MG.traceSection's render with them; every value goes in as text (MG.el).
"use strict";

(function () {
  const { el, fmt } = MG;

  // The node's counter: one message in round(1 / rate), rounded half to even as Python does.
  function every(rate) {
    const exact = 1 / rate;
    const floor = Math.floor(exact);
    const diff = exact - floor;
    const rounded = Math.abs(diff - 0.5) < 1e-9 ? (floor % 2 === 0 ? floor : floor + 1) : Math.round(exact);
    return Math.max(1, rounded);
  }

  // "/queue/orders" → the API's path for it: "traces/queue/orders" (the name encoded).
  function tracePath(destination) {
    const [, kind, name] = destination.match(/^\/(queue|topic)\/(.*)$/) || [null, "", destination.replace(/^\/+/, "")];
    return "definitions/traces/" + (kind ? kind + "/" : "") + encodeURIComponent(name);
  }

  // The end: local time (the day too when not today), and how long is left, or "ended".
  function endCell(until) {
    const end = new Date(until * 1000);
    const today = end.toDateString() === new Date().toDateString();
    const text = today ? end.toLocaleTimeString() : end.toLocaleString();
    const left = until - Date.now() / 1000;
    if (left <= 0) return el("span", { title: fmt.time(until) }, text, " ", el("span", { class: "state silent" }, "ended"));
    return el("span", { title: fmt.time(until) }, text, el("span", { class: "muted" }, " · in " + fmt.duration(left * 1000)));
  }

  MG.traceSection = function traceSection({ common, deletedName, plural, report, done, formErrors, reload }) {
    const list = document.getElementById("trace-list");
    const count = document.getElementById("trace-count");
    const form = document.getElementById("trace-form");
    const formError = document.getElementById("trace-form-error");
    const results = document.getElementById("trace-results");
    const mono = (text) => el("span", { class: "mono" }, text);
    let fresh = null;  // a destination just traced: highlighted once it shows

    function destinationCell(record) {
      const queue = record.name.match(/^\/queue\/(.+)$/);
      return deletedName(record, queue && !record.deleted
        ? el("a", { href: MG.queueHref(queue[1], record.in_vhost), class: "mono" }, record.name) : mono(record.name));
    }

    function columns() {
      const out = [
        { label: "Destination", value: destinationCell },
        { label: "Rate", title: "the share of the messages sent to it that every node traces", value: (r) => (r.trace
          ? el("span", null, "one in " + fmt.n(every(r.trace.rate)), el("span", { class: "muted" }, " (rate " + r.trace.rate + ")"))
          : "") },
        { label: "Ends", title: "when the nodes stop tracing it (the definition stays listed until stopped)",
          value: (r) => (r.trace ? endCell(r.trace.until) : "") },
        { label: "Turned on by", value: (r) => (r.trace && r.trace.by ? r.trace.by : el("span", { class: "zero" }, "")) },
        ...common(),
      ];
      if (MG.admin) {
        out.push({ label: "", value: (r) => (r.deleted ? "" : el("button", { class: "small", "data-action": "stop",
          onclick: () => stop(r) }, "Stop…")) });
      }
      return out;
    }

    function render(all, shown, filtered) {
      const live = all.filter((r) => !r.deleted);
      const running = live.filter((r) => r.trace.until > Date.now() / 1000).length;
      count.textContent = plural(live.length, "traced destination") + (live.length > running ? " · " + fmt.n(live.length - running) +
        " ended" : "");
      const empty = filtered ? "No traced destination contains “" + filtered + "”."
        : "No destination is traced. " + (MG.admin ? "Trace one with “Trace a destination…”, or with meshgate trace."
          : "An administrator traces one here, or with meshgate trace.");
      list.replaceChildren(MG.table(columns(), shown, {
        empty, rowAttributes: (r) => ({ "data-name": r.name, class: [r.deleted && "deleted", r.name === fresh && "fresh"]
          .filter(Boolean).join(" ") || null }),
      }));
      if (shown.some((r) => r.name === fresh)) fresh = null;
    }

    function failed(text) {
      list.replaceChildren(el("p", { class: "empty unreachable" }, text));
    }

    async function stop(record) {
      const confirmed = await MG.dialog({
        title: "Stop tracing " + record.name + "?",
        confirm: "Stop tracing",
        body: el("p", null, "Deletes the trace definition of " + record.name + " on every node: they stop tracing the " +
          "messages sent to it. The journeys of the messages traced so far stay on the Messages page."),
      });
      if (!confirmed) return;
      try {
        const answer = await MG.api(tracePath(record.name), { method: "DELETE", query: { vhost: record.in_vhost } });
        report(results, "ok", el("strong", null, "Stopped tracing " + record.name), " on every node" + done(answer));
      } catch (error) {
        report(results, "error", el("strong", null, "Could not stop tracing " + record.name), " — " + MG.explain(error));
      }
      reload();
    }

    // -- admin: the form ------------------------------------------------------------------------
    const FIELDS = { for_s: "minutes", rate: "rate" };  // the API's field → the form's

    const { clear: clearError, show: showError } = formErrors(form, formError, "Not traced", (field) => FIELDS[field],
      { pattern: /cannot trace|not \/queue/, input: "destination" });

    function open() {
      clearError();
      form.reset();
      form.hidden = false;
      form.scrollIntoView({ block: "nearest" });
      form.elements.destination.focus();
    }

    function close() {
      form.hidden = true;
      clearError();
    }

    // A number as typed when it is one, else the text: the API says what is wrong with it.
    const number = (text) => (text !== "" && Number.isFinite(Number(text)) ? Number(text) : text);

    async function save(event) {
      event.preventDefault();
      clearError();
      const destination = form.elements.destination.value.trim();
      if (!/^\/(queue|topic)\/./.test(destination)) {
        form.elements.destination.setAttribute("aria-invalid", "true");
        showError(new Error("give the destination as /queue/NAME or /topic/NAME"));
        return;
      }
      const rate = number(form.elements.rate.value.trim() || "1");
      const minutes = number(form.elements.minutes.value.trim() || "10");
      const body = { rate, for_s: typeof minutes === "number" ? Math.round(minutes * 60) : minutes };
      const button = document.getElementById("trace-save");
      button.disabled = true;
      try {
        const answer = await MG.api(tracePath(destination), { method: "PUT", body });
        close();
        fresh = destination;
        report(results, "ok", el("strong", null, "Tracing " + destination), done(answer));
        reload();
      } catch (error) {
        showError(error);
      } finally {
        button.disabled = false;
      }
    }

    if (MG.admin) {
      document.getElementById("new-trace").addEventListener("click", open);
      document.getElementById("trace-cancel").addEventListener("click", close);
      form.addEventListener("submit", save);
    }
    return { render, failed };
  };
})();
