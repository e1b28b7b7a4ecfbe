// Doctor: what is stuck in the mesh, why and how to unstick it (GET diagnosis, docs/doctor.md).
// Findings grouped by severity, each with its evidence, its explanation (the configuration
// keys in code) and its remedy: the command to copy, and for admins, when the remedy has a
// management request, "Apply remedy" (POST diagnosis/ID/remedy: the node diagnoses again and
// does it, audited from the doctor); one that drops or disconnects something asks first.
// Asking costs every node a look at what it holds, so the page asks when opened and on
// Refresh only.
// Every text of a finding goes in as text (MG.el), never as HTML.
"use strict";

(function () {
  const { el, fmt } = MG;
  const SEVERITIES = [
    { key: "critical", label: "Critical", tone: "bad" },
    { key: "warning", label: "Warning", tone: "warn" },
    { key: "info", label: "Info", tone: null },
  ];
  const THRESHOLDS = ["older_than", "waiting", "in_doubt", "unacked"];
  const DEFAULTS = { older_than: "", waiting: "", in_doubt: "", unacked: "" };
  const state = MG.readQuery(DEFAULTS);
  const form = document.getElementById("thresholds");
  const box = document.getElementById("findings");
  const counts = document.getElementById("counts");
  const taken = document.getElementById("taken");
  const results = document.getElementById("results");
  const unansweredCard = document.getElementById("unanswered-card");
  const unansweredList = document.getElementById("unanswered");
  const refreshButton = document.getElementById("refresh");
  let asked = 0;

  for (const name of THRESHOLDS) form.elements[name].value = state[name];

  function report(tone, ...text) {
    results.prepend(el("div", { class: "result " + tone }, ...text,
      el("span", { class: "note" }, " · " + new Date().toLocaleTimeString())));
    while (results.children.length > 4) results.lastElementChild.remove();
  }

  // The explanation's configuration keys (the finding's config_keys, any "mesh.…" or
  // "store.…" key it names, and a client's own: activemq.prefetchSize, basic.qos) in
  // <code>; the rest as text.
  function explained(text, keys) {
    const escaped = (keys || []).filter(Boolean).map((key) => key.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    const pattern = new RegExp("(" + [...escaped, "\\b(?:mesh|store|activemq|basic)\\.[a-zA-Z_]+"].join("|") + ")", "g");
    return text.split(pattern).map((part, index) => (index % 2 ? el("code", null, part) : part));
  }

  async function copy(text, button) {
    const done = (label) => {
      button.textContent = label;
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    };
    try {
      await navigator.clipboard.writeText(text);
      done("Copied");
    } catch (error) {
      // No clipboard (an insecure origin, a denied permission): select it for Ctrl+C.
      const code = button.parentElement.querySelector("code");
      const range = document.createRange();
      range.selectNodeContents(code);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      done("Selected: press Ctrl+C");
    }
  }

  // Done by the node, through the API's remedy endpoint: one call whatever the action. A
  // remedy that drops or disconnects something (remedy.confirm) is asked about first.
  async function apply(finding) {
    const remedy = finding.remedy;
    const what = remedy.label.charAt(0).toUpperCase() + remedy.label.slice(1);
    if (remedy.confirm) {
      const confirmed = await MG.dialog({
        title: what + "?",
        confirm: "Apply",
        danger: true,
        body: [el("p", null, finding.summary + "."), el("p", null, "It drops or disconnects something. The same as:"),
          el("pre", { class: "remedy-code" }, el("code", null, remedy.command))],
      });
      if (!confirmed) return;
    }
    try {
      const answer = await MG.api("diagnosis/" + encodeURIComponent(finding.id) + "/remedy",
        { method: "POST", body: { confirm: Boolean(remedy.confirm) } });
      const failed = MG.failureText(answer.failures);
      report(failed ? "partial" : "ok", el("strong", null, what), failed ? " — " + failed : " — done",
        " (" + answer.action + "). Refresh to see what is left.");
    } catch (error) {
      report("error", el("strong", null, "Could not " + remedy.label), " — " + MG.explain(error));
    }
  }

  function fact(label, ...value) {
    return [el("dt", null, label), el("dd", null, ...value)];
  }

  function remedyPart(finding) {
    const remedy = finding.remedy;
    if (!remedy) return fact("Fix", el("span", { class: "muted" }, "Nothing to run: the explanation says what to change."));
    const copyButton = el("button", { class: "small", type: "button", title: "copy the command" }, "Copy");
    copyButton.addEventListener("click", () => copy(remedy.command, copyButton));
    const applyButton = MG.admin && remedy.request ? el("button", { class: remedy.confirm ? "small danger" : "small primary",
      type: "button", title: remedy.confirm ? "do it now, after a confirmation" : "do it now",
      onclick: () => apply(finding) }, remedy.confirm ? "Apply remedy…" : "Apply remedy") : null;
    return fact("Fix",
      el("div", { class: "remedy-label" }, remedy.label, remedy.confirm
        ? el("span", { class: "kind warn", title: "it disconnects or drops something" }, "disruptive") : null),
      el("div", { class: "remedy" }, el("pre", { class: "remedy-code" }, el("code", null, remedy.command)), copyButton,
        applyButton),
      remedy.request ? el("details", { class: "remedy-request" }, el("summary", null, "management request"),
        el("pre", null, el("code", null, JSON.stringify(remedy.request, null, 2)))) : null);
  }

  function card(finding) {
    const severity = SEVERITIES.find((s) => s.key === finding.severity) || SEVERITIES[2];
    const where = [el("span", { title: finding.node }, "on ", el("strong", null, finding.node_name || finding.node.slice(0, 8)))];
    if (finding.vhost && finding.vhost !== "/") where.push(" · vhost ", el("span", { class: "mono" }, finding.vhost));
    if (finding.subject && finding.subject !== finding.node) where.push(" · ", el("span", { class: "mono" }, finding.subject));
    return el("article", { class: "finding " + finding.severity, "data-finding": finding.id, "data-kind": finding.kind },
      el("div", { class: "finding-head" },
        el("span", { class: "kind " + (severity.tone || "") }, finding.severity),
        el("span", { class: "kind mono" }, finding.kind),
        el("span", { class: "note" }, ...where)),
      el("h3", { class: "finding-summary" }, finding.summary),
      el("dl", { class: "finding-facts" },
        fact("Evidence", finding.evidence),
        fact("Why", ...explained(finding.explanation, finding.config_keys)),
        remedyPart(finding)));
  }

  function render(report_) {
    const bySeverity = Object.fromEntries(SEVERITIES.map((s) => [s.key, []]));
    for (const finding of report_.findings) (bySeverity[finding.severity] || bySeverity.info).push(finding);
    counts.replaceChildren(
      ...SEVERITIES.map((s) => MG.stat(s.label, fmt.n(bySeverity[s.key].length),
        { tone: bySeverity[s.key].length ? s.tone || undefined : "good" })),
      MG.stat("Nodes asked", fmt.n(report_.nodes.length + report_.unanswered.length),
        { tone: report_.unanswered.length ? "warn" : undefined,
          hint: report_.unanswered.length ? fmt.n(report_.unanswered.length) + " did not answer" : "all answered" }));
    taken.textContent = "asked " + fmt.time(report_.taken_at);
    const sections = SEVERITIES.filter((s) => bySeverity[s.key].length).map((s) =>
      el("section", { class: "severity-group section", "data-severity": s.key },
        el("h2", null, s.label, " ", el("span", { class: "count " + s.key }, fmt.n(bySeverity[s.key].length))),
        ...bySeverity[s.key].map(card)));
    box.replaceChildren(...(sections.length ? sections : [el("section", { class: "card section" },
      el("p", { class: "empty" }, "Nothing stuck: no backlog stranded, no old doubt, no old unacked delivery",
        report_.unanswered.length ? " on the nodes that answered." : "."))]));
    unansweredCard.hidden = !report_.unanswered.length;
    unansweredList.replaceChildren(...report_.unanswered.map((node) => el("li", { "data-node": node.node },
      el("strong", null, node.name || node.node), " ", el("span", { class: "muted mono" }, node.node.slice(0, 8)),
      " — ", node.reason)));
  }

  function query() {
    const values = {};
    for (const name of THRESHOLDS) if (state[name] !== "") values[name] = state[name];
    return values;
  }

  async function load() {
    const mine = ++asked;
    refreshButton.disabled = true;
    refreshButton.textContent = "Asking…";
    try {
      const answer = await MG.api("diagnosis", { query: query() });
      if (mine !== asked) return;
      MG.problem(null);
      render(answer);
    } catch (error) {
      if (mine !== asked) return;
      MG.loadFailed("ask the nodes for a diagnosis", error, box);
    } finally {
      if (mine === asked) {
        refreshButton.disabled = false;
        refreshButton.textContent = "Refresh";
      }
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!form.reportValidity()) return;
    for (const name of THRESHOLDS) state[name] = form.elements[name].value.trim();
    MG.writeQuery(state, DEFAULTS);
    load();
  });

  load();
  MG.live(["mesh"], {});  // the top bar's live indicator
})();
