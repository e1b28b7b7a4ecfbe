// What every console page shares: the API, the live WebSocket, formatting and
// small DOM helpers. Pages are plain scripts that use window.MG.
"use strict";

(function () {
  const body = document.body;

  function cookie(name) {
    const match = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
    return match ? decodeURIComponent(match[1]) : "";
  }

  class ApiError extends Error {
    constructor(status, code, message, node) {
      super(message);
      this.status = status;
      this.code = code;
      this.node = node;
    }
  }

  // The vhost the top bar's selector shows (?vhost= of the page's URL), or null for every
  // vhost. A queue's own page is of one vhost: "/" when its URL names none.
  const chosenVhost = new URLSearchParams(window.location.search).get("vhost");
  const vhost = chosenVhost === null || chosenVhost === "" ? (body.dataset.page === "queue" ? "/" : null) : chosenVhost;
  const IN_VHOST = /^(queues|connections|definitions)(\/|\?|$)/;  // what the API answers per vhost

  // GET/POST/DELETE /api/v1/<path>; resolves with the JSON answer, rejects with an ApiError.
  // Queue, connection and definition requests are of the chosen vhost unless `query` names one.
  async function api(path, { method = "GET", body: payload, query } = {}) {
    const url = new URL("/api/v1/" + path, window.location.origin);
    if (vhost !== null && IN_VHOST.test(path) && !(query && "vhost" in query)) url.searchParams.set("vhost", vhost);
    for (const [key, value] of Object.entries(query || {})) {
      if (value === undefined || value === null || value === "") continue;
      for (const one of [].concat(value)) url.searchParams.append(key, one);
    }
    const options = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
    if (method !== "GET") options.headers["X-CSRFToken"] = cookie("csrftoken");
    if (payload !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(payload);
    }
    let response;
    try {
      response = await fetch(url, options);
    } catch (error) {
      throw new ApiError(0, "network", "the console cannot be reached: " + error.message);
    }
    if (response.status === 401) {
      window.location.href = "/login/?next=" + encodeURIComponent(window.location.pathname);
    }
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      const error = data.error || {};
      throw new ApiError(response.status, error.code || "error", error.message || response.statusText, error.node);
    }
    return data;
  }

  // Live updates: subscribe to groups ("mesh", "queues", "events"); handlers by message type.
  function live(groups, handlers) {
    const indicator = document.getElementById("live");
    let delay = 500;
    let socket;
    function show(state, text) {
      if (!indicator) return;
      indicator.dataset.state = state;
      indicator.textContent = text;
    }
    function open() {
      const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
      socket = new WebSocket(scheme + "//" + window.location.host + "/ws/mesh");
      socket.onopen = () => {
        delay = 500;
        show("live", "live");
        socket.send(JSON.stringify({ subscribe: groups }));
      };
      socket.onmessage = (message) => {
        const data = JSON.parse(message.data);
        const handler = handlers[data.type];
        if (handler) handler(data);
        if (indicator) indicator.title = "last update " + new Date().toLocaleTimeString();
      };
      socket.onclose = (event) => {
        if (event.code === 4401) {
          window.location.href = "/login/?next=" + encodeURIComponent(window.location.pathname);
          return;
        }
        show("down", "reconnecting…");
        setTimeout(open, delay);
        delay = Math.min(delay * 2, 10000);
      };
    }
    open();
    return { close: () => socket && socket.close() };
  }

  // -- formatting ---------------------------------------------------------------------------
  const numberFormat = new Intl.NumberFormat("en");
  const fmt = {
    n(value) {
      return value === null || value === undefined ? "–" : numberFormat.format(value);
    },
    rate(value) {
      if (!value) return "0/s";
      return (value >= 100 ? numberFormat.format(Math.round(value)) : value.toFixed(1)) + "/s";
    },
    bytes(value) {
      if (value === null || value === undefined) return "–";
      const units = ["B", "KiB", "MiB", "GiB", "TiB"];
      let index = 0;
      while (value >= 1024 && index < units.length - 1) { value /= 1024; index += 1; }
      return (index ? value.toFixed(1) : value) + " " + units[index];
    },
    ago(seconds) {
      if (seconds === null || seconds === undefined) return "never";
      if (seconds < 2) return "now";
      if (seconds < 120) return Math.round(seconds) + " s ago";
      if (seconds < 7200) return Math.round(seconds / 60) + " min ago";
      return (seconds / 3600).toFixed(1) + " h ago";
    },
    since(epoch) {
      return fmt.ago(Date.now() / 1000 - epoch);
    },
    time(epoch) {
      return new Date(epoch * 1000).toLocaleString();
    },
    // A calendar day that reads the same in any locale: "Dec 2, 2026".
    date(epoch) {
      return new Date(epoch * 1000).toLocaleDateString("en", { year: "numeric", month: "short", day: "numeric" });
    },
    // The time from `from` (default: now) to `epoch`: "12 days", "1 day", "7 h"; "expired" once past.
    until(epoch, from) {
      const seconds = epoch - (from === undefined ? Date.now() / 1000 : from);
      if (seconds <= 0) return "expired";
      if (seconds < 86400) return Math.ceil(seconds / 3600) + " h";
      const days = Math.round(seconds / 86400);
      return days + (days === 1 ? " day" : " days");
    },
    // A wait, in milliseconds: "850 ms", "42 s", "7.1 min", "2.3 h".
    duration(value) {
      if (value === null || value === undefined) return "–";
      if (value < 1000) return Math.round(value) + " ms";
      if (value < 60000) return (value / 1000).toFixed(value < 10000 ? 1 : 0) + " s";
      if (value < 3600000) return (value / 60000).toFixed(1) + " min";
      return (value / 3600000).toFixed(1) + " h";
    },
    ms(value) {
      if (value === null || value === undefined) return "–";
      return value < 1 ? value.toFixed(3) + " ms" : value < 1000 ? value.toFixed(1) + " ms"
        : (value / 1000).toFixed(1) + " s";
    },
  };

  // The latency (ms) below which `quantile` of a model.latency histogram falls.
  function percentile(counts, quantile) {
    const total = counts.reduce((a, b) => a + b, 0);
    if (!total) return null;
    let seen = 0;
    for (let index = 0; index < counts.length; index += 1) {
      seen += counts[index];
      if (counts[index] && seen >= quantile * total) {
        // Bucket 31 is open-ended: its lower bound. Snapshots leave trailing empty buckets out.
        const high = index === 31 ? Math.pow(2, index - 1) : Math.pow(2, index);
        return high / 1000;
      }
    }
    return null;
  }

  // -- DOM ------------------------------------------------------------------------------------
  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "class") node.className = value;
      else if (key === "style") node.style.cssText = value; // a style attribute would break the CSP
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function problem(message) {
    const box = document.getElementById("problem");
    if (!box) return;
    box.hidden = !message;
    box.textContent = message || "";
  }

  // What went wrong, in a sentence for the page: the API's message with its status, and
  // the node it concerns (names: id → name).
  function explain(error, names = {}) {
    if (!(error instanceof ApiError)) return String(error && error.message || error);
    if (error.status === 0) return error.message;
    const where = error.node ? " (on " + (names[error.node] || error.node) + ")" : "";
    return error.message + where + " [HTTP " + error.status + "]";
  }

  // A read that failed: said at the top of the page, and in `box` while it still shows its
  // "Loading…" placeholder (class "loading").
  function loadFailed(what, error, box, names) {
    problem("Could not " + what + ": " + explain(error, names));
    const placeholder = box && box.querySelector(".loading");
    if (placeholder) placeholder.textContent = "Nothing to show: the console could not " + what + ".";
  }

  function debounce(fn, wait) {
    let timer = null;
    return (...args) => {
      clearTimeout(timer);
      timer = setTimeout(() => fn(...args), wait);
    };
  }

  // fn at most once per `wait` ms, the last call always honoured: for refreshing on a
  // stream of updates, where a debounce would never fire.
  function throttle(fn, wait) {
    let last = 0;
    let timer = null;
    return () => {
      if (timer) return;
      const run = () => { timer = null; last = Date.now(); fn(); };
      const rest = last + wait - Date.now();
      if (rest <= 0) run();
      else timer = setTimeout(run, rest);
    };
  }

  // A node's or a link's state as a coloured badge.
  function badge(state) {
    return el("span", { class: "state " + state }, state);
  }

  // A number tile: label, value and an optional line below; tone: "good", "bad", "warn".
  function stat(label, value, { tone, hint, title } = {}) {
    return el("div", { class: "stat" + (tone ? " " + tone : ""), title },
      el("div", { class: "stat-label" }, label),
      el("div", { class: "stat-value" }, value),
      hint ? el("div", { class: "stat-hint" }, hint) : null);
  }

  // A value at a dotted path of an object ("rates.enqueue").
  function pick(row, path) {
    return path.split(".").reduce((value, part) => (value === null || value === undefined ? value : value[part]), row);
  }

  // Rows sorted in the browser by {field, reverse}, for tables that are not paged by the API.
  function sortRows(rows, sort) {
    if (!sort || !sort.field) return rows;
    const sign = sort.reverse ? -1 : 1;
    return [...rows].sort((a, b) => {
      const x = pick(a, sort.field);
      const y = pick(b, sort.field);
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (typeof x === "string" ? x.localeCompare(y) : x - y) * sign;
    });
  }

  // A table that scrolls sideways rather than overflow. columns: [{label, value(row), num,
  // sort (a field), title}]; clicking a sortable header calls onSort({field, reverse}):
  // the same field flips, a new one starts largest first for numbers, A→Z for text.
  // detail(row): an element shown in a full-width row under it (e.g. when expanded), or null.
  function table(columns, rows, { sort, onSort, empty, rowAttributes, detail } = {}) {
    if (!rows.length) return el("p", { class: "empty" }, empty || "Nothing to show.");
    const header = columns.map((column) => {
      const sortable = Boolean(column.sort && onSort);
      const active = sortable && sort && sort.field === column.sort;
      const next = active ? { field: column.sort, reverse: !sort.reverse } : { field: column.sort, reverse: Boolean(column.num) };
      return el("th", {
        class: [column.num && "num", sortable && "sortable", active && "sorted"].filter(Boolean).join(" ") || null,
        title: column.title || (sortable ? "sort by " + column.label.toLowerCase() : null),
        "aria-sort": active ? (sort.reverse ? "descending" : "ascending") : null,
        onclick: sortable ? () => onSort(next) : null,
      }, column.label, active ? (sort.reverse ? " ▼" : " ▲") : null);
    });
    const body = rows.flatMap((row) => {
      const line = tableRow(columns, row, rowAttributes ? rowAttributes(row) : null);
      const more = detail ? detail(row) : null;
      return more ? [line, el("tr", { class: "detail" }, el("td", { colspan: columns.length }, more))] : line;
    });
    return el("div", { class: "table-wrap" },
      el("table", null, el("thead", null, el("tr", null, header)), el("tbody", null, body)));
  }

  // One row of such a table, e.g. to put a new one on top.
  function tableRow(columns, row, attributes) {
    return el("tr", attributes, columns.map((column) => el("td", { class: column.num ? "num" : null }, column.value(row))));
  }

  // "1–100 of 1,234 · ‹ Previous · page 1 of 13 · Next ›" for an API page; onPage(number).
  function pager(answer, onPage) {
    const first = answer.total_count ? (answer.page - 1) * answer.page_size + 1 : 0;
    const last = Math.min(answer.page * answer.page_size, answer.total_count);
    return el("div", { class: "pager" },
      el("span", { class: "muted" }, fmt.n(first) + "–" + fmt.n(last) + " of " + fmt.n(answer.total_count)),
      el("button", { disabled: answer.page <= 1, onclick: () => onPage(answer.page - 1) }, "‹ Previous"),
      el("span", null, "page " + answer.page + " of " + Math.max(1, answer.page_count)),
      el("button", { disabled: answer.page >= answer.page_count, onclick: () => onPage(answer.page + 1) }, "Next ›"));
  }

  // A modal confirmation: resolves true when confirmed. `body` may hold form fields, which
  // must be valid to confirm; read them once it resolves.
  function dialog({ title, body: content, confirm = "OK", danger = false }) {
    return new Promise((resolve) => {
      const box = el("dialog", { class: "dialog" },
        el("form", { method: "dialog" },
          el("h2", null, title),
          el("div", { class: "dialog-body" }, content),
          el("div", { class: "dialog-buttons" },
            el("button", { value: "cancel", formnovalidate: true }, "Cancel"),
            el("button", { value: "ok", class: danger ? "danger" : "primary" }, confirm))));
      box.addEventListener("close", () => {
        resolve(box.returnValue === "ok");
        box.remove();
      });
      document.body.append(box);
      box.showModal();
    });
  }

  // "node3 did not answer: …" for the `failures` of an action's answer; names: id → name.
  function failureText(failures, names = {}) {
    return (failures || []).map((failure) => {
      const node = failure.node ? (names[failure.node] || failure.node) : "a node";
      return node + " did not answer: " + failure.message;
    }).join("; ");
  }

  // URL query ⇄ a page's view state (filters, sort, page), so a reload or a shared link
  // shows the same. defaults: {key: default}; arrays for repeated keys.
  function readQuery(defaults) {
    const params = new URLSearchParams(window.location.search);
    const state = {};
    for (const [key, fallback] of Object.entries(defaults)) {
      const values = params.getAll(key);
      if (Array.isArray(fallback)) state[key] = values.length ? values : fallback;
      else if (!values.length) state[key] = fallback;
      else if (typeof fallback === "number") state[key] = Number(values[0]) || fallback;
      else if (typeof fallback === "boolean") state[key] = values[0] === "true";
      else state[key] = values[0];
    }
    return state;
  }

  function writeQuery(state, defaults) {
    const params = new URLSearchParams();
    if (chosenVhost) params.set("vhost", chosenVhost);  // the top bar's, kept with the page's own
    for (const [key, value] of Object.entries(state)) {
      if (JSON.stringify(value) === JSON.stringify(defaults[key])) continue;
      for (const one of [].concat(value)) params.append(key, one);
    }
    const query = params.toString();
    window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : ""));
  }

  // -- rates chart (uPlot, which the page includes) ------------------------------------------
  const RATES = [
    { key: "enqueue", label: "enqueue", color: "#2f6fde" },
    { key: "ack", label: "ack", color: "#1f9d55" },
    { key: "forward", label: "forward", color: "#8e44ad" },
    { key: "redistribute", label: "redistribute", color: "#e67e22" },
  ];

  // An axis tick: 1,500 → "1.5k/s".
  function compact(value) {
    if (value >= 1e6) return +(value / 1e6).toFixed(1) + "M/s";
    if (value >= 1e3) return +(value / 1e3).toFixed(1) + "k/s";
    return +value.toFixed(2) + "/s";
  }

  // Time ticks in the reader's clock format, with seconds while ticks are under a minute apart.
  function clockTicks(u, ticks) {
    const seconds = ticks.length > 1 && ticks[1] - ticks[0] < 60;
    return ticks.map((t) => new Date(t * 1000).toLocaleTimeString([], {
      hour: "numeric", minute: "2-digit", second: seconds ? "2-digit" : undefined }));
  }

  // An axis tick in milliseconds: 0.5 → "0.5 ms", 2048 → "2 s".
  function compactMs(value) {
    if (value >= 1000) return +(value / 1000).toFixed(1) + " s";
    return +value.toFixed(value < 10 ? 2 : 0) + " ms";
  }

  // Lines over the last `seconds` (uPlot): series [{key, label, color}], `format` for the
  // legend and `tick` for the y axis. set(points, emptyText) with points [{t, key: value}]
  // (null: a gap), add(t, values) for each live update, range(seconds) to look further.
  // Without a value to draw, the chart says `emptyText` instead.
  function lineChart(container, { series, seconds = 300, height = 220, format = fmt.rate, tick = compact } = {}) {
    const data = [[], ...series.map(() => [])];
    const empty = el("p", { class: "chart-empty", hidden: true });
    container.classList.add("has-chart");
    const newest = (values) => {
      for (let index = values.length - 1; index >= 0; index -= 1) if (values[index] !== null) return values[index];
      return null;
    };
    const plot = new window.uPlot({
      width: Math.max(300, container.clientWidth),
      height,
      scales: {
        x: { time: true, range: () => [Date.now() / 1000 - seconds, Date.now() / 1000] },  // always the last `seconds`
        y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] },
      },
      // Away from the cursor, the legend shows the newest values.
      series: [{ label: "time", value: (u, t) => (t ? new Date(t * 1000).toLocaleTimeString() : "now") },
        ...series.map((line, index) => ({
          label: line.label, stroke: line.color, width: 2, points: { show: false }, spanGaps: false,
          value: (u, v, s, at) => format(at === null ? newest(data[index + 1]) : v),
        }))],
      // Narrow charts tick every minute rather than every five.
      axes: [{ stroke: "#667085", grid: { stroke: "#eef0f3" }, space: (u) => (u.width < 700 ? 60 : 110), values: clockTicks },
        { stroke: "#667085", grid: { stroke: "#eef0f3" }, size: 64, values: (u, ticks) => ticks.map(tick) }],
      legend: { live: true },
    }, data, container);
    container.append(empty);
    new ResizeObserver(() => plot.setSize({ width: Math.max(300, container.clientWidth), height }))
      .observe(container);
    let emptyText = "No data yet.";
    function redraw() {
      const from = Date.now() / 1000 - seconds;
      let drop = 0;
      while (drop < data[0].length && data[0][drop] < from) drop += 1;
      if (drop) data.forEach((values) => values.splice(0, drop));
      plot.setData(data);
      const drawn = data.slice(1).some((values) => values.some((value) => value !== null));
      empty.hidden = drawn;
      empty.textContent = drawn ? "" : emptyText;
      container.dataset.points = String(data[0].length);  // for tests and the curious
      container.dataset.newest = data[0].length ? String(data[0][data[0].length - 1]) : "";
    }
    function put(t, values) {
      const value = (line) => (values[line.key] === undefined ? 0 : values[line.key]);
      const last = data[0].length - 1;
      if (last >= 0 && t <= data[0][last] + 0.5) {  // same second (or late): the newest word wins
        series.forEach((line, index) => { data[index + 1][last] = value(line); });
        return;
      }
      data[0].push(t);
      series.forEach((line, index) => data[index + 1].push(value(line)));
    }
    return {
      set(points, text) {
        if (text) emptyText = text;
        data.forEach((values) => values.splice(0));
        points.forEach((point) => put(point.t, point));
        redraw();
      },
      add(t, values) {
        put(t, values);
        redraw();
      },
      range(next) {
        seconds = next;
        redraw();
      },
    };
  }

  // Messages per second over the last `seconds`: set(points) with the API's history
  // ([{t, enqueue, ack, forward, redistribute}]), then add(t, rates) for each live update.
  function rateChart(container, { seconds = 300, height = 220 } = {}) {
    return lineChart(container, { series: RATES, seconds, height });
  }

  const LATENCIES = [
    { key: "p50_ms", label: "p50", color: "#1f9d55" },
    { key: "p95_ms", label: "p95", color: "#e67e22" },
    { key: "p99_ms", label: "p99", color: "#d63b3b" },
  ];
  const DEPTHS = [
    { key: "depth_last", label: "waiting (last)", color: "#2f6fde" },
    { key: "depth_max", label: "waiting (most)", color: "#8e44ad" },
  ];
  const RANGES = [{ seconds: 300, label: "5 min" }, { seconds: 3600, label: "1 h" }];

  // "Spark pipeline, 10 s windows", or why the chart comes from snapshots.
  function sourceText(history, pipeline) {
    if (history.source === "pipeline") {
      return "Spark pipeline, " + (history.resolution === "1m" ? "1 min" : "10 s") + " windows";
    }
    if (pipeline && pipeline.running) return "from snapshots; the pipeline's windows do not cover this range yet";
    return "from snapshots; the pipeline is not running";
  }

  function pipelineTitle(pipeline) {
    if (!pipeline || pipeline.age === null || pipeline.age === undefined) {
      return "No metrics pipeline has written to this Redis (meshgate pipeline, docs/pipeline.md).";
    }
    return "Last batch #" + pipeline.batch + " applied " + fmt.ago(pipeline.age) + " on " + pipeline.master + ", " +
      fmt.n(pipeline.batch_entries) + " entries; " + (pipeline.running ? "running" : "stopped: no batch for " +
      Math.round(pipeline.stale_after) + " s");
  }

  // The charts of a history endpoint (`path`: "overview/history", "queues/<name>/history"):
  // rates, and from the pipeline also latency (and depth, given `depth`). Reads the history
  // and the pipeline's status, says where the charts come from in `source`, lets `ranges`
  // pick 5 min or 1 h (kept in the URL), and keeps up: from the pipeline it reads the
  // windows again every few seconds; from snapshots live(t, rates) adds each live update
  // and a look at the pipeline every 10 s notices when it starts.
  function historyCharts({ path, rates, source, ranges, latency, depth, what = "read the rates" }) {
    const defaults = { range: 300 };
    const state = readQuery(defaults);
    if (!RANGES.some((range) => range.seconds === state.range)) state.range = defaults.range;
    const rateLines = rateChart(rates.box, { seconds: state.range });
    let latencyLines = null;
    let depthLines = null;
    let current = null;  // the last history answer
    let pipeline = null;
    let asked = 0;
    let timer = null;

    function showExtras(on) {
      for (const part of [latency, depth]) if (part) part.card.hidden = !on;
      if (!on) return;
      if (latency && !latencyLines) {
        latencyLines = lineChart(latency.box, { series: LATENCIES, seconds: state.range, format: fmt.ms, tick: compactMs });
      }
      if (depth && !depthLines) {
        depthLines = lineChart(depth.box, { series: DEPTHS, seconds: state.range, format: fmt.n,
          tick: (value) => numberFormat.format(value) });
      }
    }

    function render(history) {
      current = history;
      const fromPipeline = history.source === "pipeline";
      source.textContent = sourceText(history, pipeline);
      source.dataset.source = history.source;
      source.title = pipelineTitle(pipeline);
      const noWindow = "The pipeline has no window here in this range yet.";
      rateLines.set(history.points, fromPipeline ? noWindow
        : "No rates yet: a rate needs two snapshots of a node, a second or two after it starts.");
      showExtras(fromPipeline);
      if (fromPipeline && latencyLines) {
        latencyLines.set(history.points, history.points.length ? "No message was acknowledged in these windows: " +
          "latency is timed at the ack." : noWindow);
      }
      if (fromPipeline && depthLines) depthLines.set(history.points, noWindow);
    }

    function schedule() {
      clearTimeout(timer);
      const wait = current && current.source === "pipeline" ? (current.resolution === "1m" ? 20000 : 5000) : 10000;
      timer = setTimeout(tick, wait);
    }

    async function load() {
      const mine = ++asked;
      try {
        const [history, status] = await Promise.all([api(path, { query: { seconds: state.range } }), api("pipeline")]);
        if (mine !== asked) return;
        pipeline = status;
        render(history);
      } catch (error) {
        if (mine !== asked) return;
        loadFailed(what, error);
      }
      schedule();
    }

    // From the pipeline: its windows again. From snapshots: is the pipeline running now?
    async function tick() {
      if (!current || current.source === "pipeline") return load();
      const mine = asked;
      try {
        const status = await api("pipeline");
        if (mine !== asked) return;
        const started = status.running && !(pipeline && pipeline.running);
        pipeline = status;
        if (started) return load();
        source.textContent = sourceText(current, pipeline);
        source.title = pipelineTitle(pipeline);
      } catch (error) {
        // The next look tells; the live updates still draw.
      }
      schedule();
    }

    function pick(seconds) {
      state.range = seconds;
      writeQuery(state, defaults);
      ranges.querySelectorAll("button").forEach((button) => {
        button.setAttribute("aria-pressed", String(Number(button.dataset.seconds) === seconds));
      });
      for (const lines of [rateLines, latencyLines, depthLines]) if (lines) lines.range(seconds);
      load();
    }

    ranges.replaceChildren(...RANGES.map((range) => el("button", {
      class: "small", "data-seconds": range.seconds, "aria-pressed": String(range.seconds === state.range),
      title: "the last " + range.label, onclick: () => pick(range.seconds) }, range.label)));
    load();
    return {
      load,
      // A live update's rates: drawn while the charts come from snapshots.
      live(t, values) {
        if (current && current.source === "snapshots") rateLines.add(t, values);
      },
    };
  }

  // A list the API pages, its state in the URL: `load()` asks for the page `query()` says,
  // drops answers to older requests, and goes back to page 1 when the list shrank under
  // the page shown; `render(answer)` draws an answer; `change({...})` moves (then `changed()`).
  function pagedLoader({ path, what, state, defaults, box, query, render, changed }) {
    let asked = 0;
    async function load() {
      const mine = ++asked;
      try {
        const answer = await api(path, { query: query() });
        if (mine !== asked) return;
        problem(null);
        render(answer);
      } catch (error) {
        if (mine !== asked) return;
        if (error.status === 404 && state.page > 1) {
          change({ page: 1 });
          return;
        }
        loadFailed(what, error, box);
      }
    }
    function change(changes) {
      Object.assign(state, changes);
      writeQuery(state, defaults);
      if (changed) changed();
      load();
    }
    return { load, change };
  }

  // A list the API filters by name, sorts and pages (queues, connections).
  function pagedList({ path, what, state, defaults, filter, pageSize, box, render }) {
    const list = pagedLoader({ path, what, state, defaults, box, render, query: () => ({
      name: state.name, sort: state.sort, sort_reverse: state.reverse, page: state.page, page_size: state.size,
    }) });
    filter.value = state.name;
    pageSize.value = String(state.size);
    filter.addEventListener("input", debounce(() => list.change({ name: filter.value.trim(), page: 1 }), 250));
    pageSize.addEventListener("change", () => list.change({ size: Number(pageSize.value), page: 1 }));
    return list;
  }

  // A link to a console page of the chosen vhost; a queue's page names the queue's own vhost.
  function withVhost(href, of = vhost) {
    if (of === null || of === undefined || (of === "/" && href.startsWith("/queues/") && href !== "/queues/")) return href;
    return href + (href.includes("?") ? "&" : "?") + "vhost=" + encodeURIComponent(of);
  }

  function queueHref(name, of) {
    return withVhost("/queues/" + encodeURIComponent(name) + "/", of || "/");
  }

  // The top bar's selector: every vhost the mesh has; choosing one reloads the page of it
  // (back to the first page of a list), and the menu's links keep it.
  async function vhostSelector() {
    const select = document.getElementById("vhost-select");
    if (!select) return;
    if (vhost !== null) select.append(el("option", { value: vhost }, vhost));
    select.value = vhost === null ? "" : vhost;
    select.parentElement.classList.toggle("chosen", vhost !== null);
    const kept = chosenVhost || null;  // a queue page's own "/" is not a choice to carry
    for (const link of document.querySelectorAll("header.top nav a")) link.href = withVhost(link.getAttribute("href"), kept);
    select.addEventListener("change", () => {
      const params = new URLSearchParams(window.location.search);
      params.delete("page");
      if (select.value === "") params.delete("vhost");
      else params.set("vhost", select.value);
      const path = body.dataset.page === "queue" ? "/queues/" : window.location.pathname;
      const query = params.toString();
      window.location.assign(path + (query ? "?" + query : ""));
    });
    // The vhosts are asked for when the selector is about to be used, not on every page load.
    let asked = false;
    async function fill() {
      if (asked) return;
      asked = true;
      try {
        const answer = await api("vhosts", { query: { page_size: 500 } });
        for (const row of answer.items) {
          if (row.name !== vhost) select.append(el("option", { value: row.name }, row.name));
        }
      } catch (error) {
        asked = false;
        select.title = "the vhosts could not be read: " + error.message;
      }
    }
    select.addEventListener("focus", fill);
    select.addEventListener("pointerdown", fill);
  }

  window.MG = {
    vhost, withVhost, queueHref,
    admin: body.dataset.admin === "true", api, ApiError, live, fmt, percentile, el, problem, explain, loadFailed, debounce,
    throttle, badge, stat, sortRows, table, tableRow, pager, dialog, failureText, readQuery, writeQuery, rateChart,
    lineChart, historyCharts, pagedLoader, pagedList,
  };
  vhostSelector();
})();
