// Chatgate usage dashboard: every user's usage from the admin API, as charts (Chart.js,
// vendored, loaded by index.html as window.Chart) with a table and a CSV download under each.
// The figures are drawn as the API returns them; the one sum made here is "other users" in
// the per-user charts (each day's total less the users drawn one by one).

import { errorFrom, getApiKey, setApiKey, authHeaders } from "../api.js";

const Chart = window.Chart;
const $ = (id) => document.getElementById(id);
const DAY_MS = 86400000;
/** Rows asked for per request, and the most pages read for one chart (a year of many users). */
const PAGE_ROWS = 1000;
const MAX_PAGES = 50;
/** Users drawn one by one in the per-user charts; the rest are summed as "other users". */
const USER_SERIES = 6;
const TOP_USERS = 10;
const PALETTE = ["#2f6fde", "#e07b39", "#2a9d8f", "#c4455b", "#8a63d2", "#d4a72c",
                 "#5b8c5a", "#3d5a80", "#b56576"];
const GREY = "#a1a1a1";
const OTHERS = "other users";
const charts = new Map(); // canvas test id -> Chart

// ---------- formatting ----------

const whole = new Intl.NumberFormat("en-US");
const tokens = (n) => whole.format(n);
/** A cost in USD; null is unknown (an unpriced model), never shown as 0. */
function usd(value, unpriced = 0) {
  if (value === null || value === undefined) return unpriced ? "unknown" : "–";
  const text = value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 });
  return unpriced ? `${text} + ${unpriced} unpriced` : text;
}
const isoDay = (date) => date.toISOString().slice(0, 10);

function daysOf(start, end) {
  const days = [];
  for (let t = Date.parse(start); t <= Date.parse(end); t += DAY_MS) days.push(isoDay(new Date(t)));
  return days;
}

// ---------- the API ----------

/** A query string; an array value is the parameter repeated (`user_id=a&user_id=b`). */
function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    for (const one of Array.isArray(value) ? value : [value]) search.append(name, one);
  }
  return search;
}

async function getJson(path, params) {
  const response = await fetch(`${path}?${query(params)}`,
                               { headers: { Accept: "application/json", ...authHeaders() } });
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

/** Every row of a report (page after page), and the first page's answer for its totals. */
async function report(range, groupBy, more = {}) {
  let answer = null;
  const rows = [];
  for (let page = 0, offset = 0; page < MAX_PAGES && offset !== null; page++) {
    const next = await getJson("/api/admin/usage/report",
                               { ...range, ...more, group_by: groupBy, limit: PAGE_ROWS, offset });
    answer = answer || next;
    rows.push(...next.rows);
    offset = next.page.next_offset;
  }
  return { ...answer, rows };
}

async function downloadCsv(path, params, name) {
  const response = await fetch(`${path}?${query({ ...params, format: "csv" })}`,
                               { headers: authHeaders() });
  if (!response.ok) throw await errorFrom(response);
  const link = document.createElement("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

// ---------- charts ----------

/** Series keyed by `seriesKey`, one value per label: the rows' `field`, 0 where none; in
 *  `order` when given (the top users first), "other users" last and grey. */
function seriesOf(rows, labels, labelKey, seriesKey, field, order = null) {
  const index = new Map(labels.map((label, i) => [label, i]));
  const series = new Map();
  for (const row of rows) {
    const name = row[seriesKey];
    if (!series.has(name)) series.set(name, labels.map(() => 0));
    series.get(name)[index.get(row[labelKey])] += row[field] || 0;
  }
  const rank = (name) => (name === OTHERS ? Infinity : order ? order.indexOf(name) : 0);
  const entries = [...series.entries()].sort((a, b) => rank(a[0]) - rank(b[0]));
  return entries.map(([label, data], i) => ({
    label, data, backgroundColor: label === OTHERS ? GREY : PALETTE[i % PALETTE.length] }));
}

/** A bar chart on the canvas `testId`; `counts`: whole numbers only on the value axis. */
function draw(testId, type, labels, datasets,
              { stacked = true, horizontal = false, counts = false } = {}) {
  const canvas = document.querySelector(`canvas[data-testid="${testId}"]`);
  charts.get(testId)?.destroy();
  const axis = { stacked, beginAtZero: true, ticks: { maxRotation: 0, autoSkip: true } };
  const values = { ...axis, ticks: { ...axis.ticks, precision: counts ? 0 : undefined } };
  charts.set(testId, new Chart(canvas, {
    type, data: { labels, datasets },
    options: {
      responsive: true, maintainAspectRatio: false, animation: false,
      indexAxis: horizontal ? "y" : "x",
      scales: horizontal ? { x: values, y: axis } : { x: axis, y: values },
      plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
    },
  }));
}

// ---------- tables ----------

function cell(row, text, numeric = false) {
  const td = document.createElement(row.parentElement?.tagName === "THEAD" ? "th" : "td");
  td.textContent = text;
  if (numeric) td.className = "num";
  row.append(td);
}

/** A table of `rows` under the section's charts, with its CSV download. */
function table(section, columns, rows, csv, empty = "No usage in this range.") {
  section.querySelector(".table-box")?.remove();
  const box = document.createElement("div");
  box.className = "table-box";
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = "Download CSV";
  button.dataset.testid = `csv-${section.id}`;
  button.addEventListener("click", () => downloadCsv(...csv).catch(show));
  const wrap = document.createElement("div");
  wrap.className = "scroll";
  const t = document.createElement("table");
  t.dataset.testid = `table-${section.id}`;
  const head = t.createTHead().insertRow();
  for (const [title, , numeric] of columns) cell(head, title, numeric);
  const body = t.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    for (const [, value, numeric] of columns) cell(tr, value(row), numeric);
  }
  if (!rows.length) {
    const none = body.insertRow();
    cell(none, empty);
    none.cells[0].colSpan = columns.length;
  }
  wrap.append(t);
  box.append(button, wrap);
  section.append(box);
}

const TOKEN_COLUMNS = [
  ["Tokens", (r) => tokens(r.total_tokens), true],
  ["Prompt", (r) => tokens(r.prompt_tokens), true],
  ["Completion", (r) => tokens(r.completion_tokens), true],
];
/** Shown when the API reports it (a gateway that records the providers' reasoning tokens). */
const REASONING = ["Reasoning", (r) => tokens(r.reasoning_tokens ?? 0), true];
const COST_AND_CALLS = [
  ["Cost (USD)", (r) => usd(r.cost_usd, r.unpriced_call_count), true],
  ["Calls", (r) => tokens(r.llm_call_count), true],
];
const figures = (answer) => [...TOKEN_COLUMNS,
                             ...("reasoning_tokens" in answer.totals ? [REASONING] : []),
                             ...COST_AND_CALLS];
const MESSAGES = ["Messages", (r) => tokens(r.message_count), true];

// ---------- the sections ----------

function showTotals(usage, refusals) {
  const t = usage.totals;
  $("total-tokens").textContent = tokens(t.total_tokens);
  const unpriced = t.unpriced_call_count;
  $("total-cost").textContent = t.cost_usd === null && unpriced ? "unknown" : usd(t.cost_usd);
  $("total-unpriced").textContent = unpriced
    ? `and ${tokens(unpriced)} call${unpriced === 1 ? "" : "s"} without a price` : "";
  $("total-calls").textContent = tokens(t.llm_call_count);
  $("total-messages").textContent = tokens(t.message_count);
  $("total-refusals").textContent = tokens(refusals.total);
}

function showDaily(id, answer, seriesKey, labelName, order = null) {
  const days = daysOf(answer.start, answer.end);
  const prefix = id === "by-model" ? "chart-model" : "chart-user";
  const series = (field) => seriesOf(answer.rows, days, "day", seriesKey, field, order);
  draw(`${prefix}-tokens`, "bar", days, series("total_tokens"));
  draw(`${prefix}-cost`, "bar", days, series("cost_usd"));
  const groupBy = "day," + (seriesKey === "model" ? "model" : "user");
  table($(id), [["Day", (r) => r.day], [labelName, (r) => r[seriesKey]], ...figures(answer), MESSAGES],
        answer.rows, csvArgs(answer, groupBy));
}

const SUMMED = ["total_tokens", "prompt_tokens", "completion_tokens", "llm_call_count",
                "message_count", "unpriced_call_count"];

/** Each day's figures of the users not drawn one by one: the day's (every user's) less
 *  theirs. Costs to the rollup's nano-dollar, so a difference shows no binary noise. */
function otherUsers(days, drawnRows) {
  return days.rows.flatMap((day) => {
    const mine = drawnRows.filter((r) => r.day === day.day);
    const row = { day: day.day, user_id: OTHERS };
    for (const f of SUMMED) row[f] = day[f] - mine.reduce((sum, r) => sum + r[f], 0);
    row.cost_usd = day.cost_usd === null ? null
      : Math.round((day.cost_usd - mine.reduce((sum, r) => sum + (r.cost_usd || 0), 0)) * 1e9) / 1e9;
    return row.total_tokens > 0 || row.llm_call_count > 0 ? [row] : [];
  });
}

/** Per day and user: the USER_SERIES users with the most tokens, and the rest as one. */
async function perUser(range, top, byDay) {
  const users = top.rows.slice(0, USER_SERIES).map((r) => r.user_id);
  if (!users.length) return { ...byDay, rows: [] };
  const drawn = await report(range, "day,user", { user_id: users });
  const others = top.page.total_rows > users.length ? otherUsers(byDay, drawn.rows) : [];
  const rows = [...drawn.rows, ...others].sort((a, b) => (a.day < b.day ? -1 : a.day > b.day ? 1 : 0));
  return { ...drawn, rows };
}

function showTopUsers(answer) {
  const rows = answer.rows;
  draw("chart-top-users", "bar", rows.map((r) => r.user_id),
       [{ label: "tokens", data: rows.map((r) => r.total_tokens), backgroundColor: PALETTE[0] }],
       { stacked: false, horizontal: true });
  table($("top-users"), [["User", (r) => r.user_id], ...figures(answer), MESSAGES], rows,
        csvArgs(answer, "user"));
}

function showStages(answer) {
  const rows = answer.rows;
  const labels = rows.map((r) => r.stage);
  const bars = (field, color) => [{ label: field === "total_tokens" ? "tokens" : "calls",
                                    data: rows.map((r) => r[field]), backgroundColor: color }];
  draw("chart-stage-tokens", "bar", labels, bars("total_tokens", PALETTE[0]), { stacked: false });
  draw("chart-stage-calls", "bar", labels, bars("llm_call_count", PALETTE[1]),
       { stacked: false, counts: true });
  table($("by-stage"), [["Stage", (r) => r.stage], ...figures(answer)], rows,
        csvArgs(answer, "stage"));
}

function showRefusals(answer) {
  const days = daysOf(answer.start, answer.end);
  draw("chart-refusals", "bar", days, seriesOf(answer.rows, days, "day", "reason", "refusal_count"),
       { counts: true });
  table($("refusals"), [["Day", (r) => r.day], ["Reason", (r) => r.reason],
                        ["Refusals", (r) => tokens(r.refusal_count), true]], answer.rows,
        ["/api/admin/refusals", rangeOf(answer), `refusals-${answer.start}-${answer.end}.csv`],
        "No refused requests in this range.");
}

const rangeOf = (answer) => ({ start: answer.start, end: answer.end });
const csvArgs = (answer, groupBy) => ["/api/admin/usage/report", { ...rangeOf(answer), group_by: groupBy },
                                      `usage-${groupBy.replace(",", "-")}-${answer.start}-${answer.end}.csv`];

// ---------- the page ----------

function show(error) {
  $("notice").textContent = error ? error.message : "";
  $("notice").className = error ? "bad" : "";
  if (error && (error.status === 401 || error.status === 403)) {
    $("notice").textContent = error.status === 401
      ? "This dashboard needs an admin API key: enter it under “API key”."
      : "This key is not an admin key: the dashboard needs one.";
    $("key-box").open = true;
  }
}

/** Bumped by every load: the answers of an older one (a range changed meanwhile) are dropped. */
let loads = 0;

async function load() {
  setApiKey($("api-key").value.trim());
  const range = { start: $("range-from").value, end: $("range-to").value };
  const board = $("dashboard");
  const mine = ++loads;
  board.dataset.state = "loading";
  show(null);
  try {
    const [byModel, byDay, top, stages, refusals] = await Promise.all([
      report(range, "day,model"), report(range, "day"),
      getJson("/api/admin/usage/report", { ...range, group_by: "user", limit: TOP_USERS }),
      report(range, "stage"), getJson("/api/admin/refusals", range)]);
    const byUser = await perUser(range, top, byDay);
    if (mine !== loads) return;
    showTotals(byModel, refusals);
    showDaily("by-model", byModel, "model", "Model");
    showDaily("by-user", byUser, "user_id", "User", top.rows.map((r) => r.user_id));
    showTopUsers(top);
    showStages(stages);
    showRefusals(refusals);
    board.dataset.state = "ready";
  } catch (error) {
    if (mine !== loads) return;
    board.dataset.state = "failed";
    show(error);
  }
}

function setRange(days) {
  const today = new Date();
  $("range-to").value = isoDay(today);
  $("range-from").value = isoDay(new Date(today.getTime() - (days - 1) * DAY_MS));
}

function start() {
  const params = new URLSearchParams(location.search);
  setRange(30);
  if (params.get("start")) $("range-from").value = params.get("start");
  if (params.get("end")) $("range-to").value = params.get("end");
  $("api-key").value = getApiKey();
  $("api-key").addEventListener("change", load);
  for (const button of document.querySelectorAll("[data-days]")) {
    button.addEventListener("click", () => { setRange(Number(button.dataset.days)); load(); });
  }
  $("range-form").addEventListener("submit", (event) => { event.preventDefault(); load(); });
  load();
}

start();
