// The dashboard: polls the controller's read-only API once a second and redraws; switches the scheduler.
import { mbps, row } from "./dom.js";
import { drawTimeline } from "./timeline.js";
import { drawTopology, updateLinks } from "./topology.js";

const POLL_MS = 1000;
const RECENT_S = 60;
const PAGE_LIMIT = 50; // the largest page of /v1/echelons (docs/api.md, "Pages")
const $ = (id) => document.getElementById(id);
let topologyName = null;
let polls = 0;

async function getJson(path, options = {}) {
  const answer = await fetch(`/v1/${path}`, options);
  const body = await answer.json();
  if (!answer.ok) throw new Error(body.error ? `${body.error.field}: ${body.error.problem}` : answer.statusText);
  return body;
}

async function poll() {
  try {
    const [health, links, echelons, rounds] = await Promise.all([
      getJson("health"), getJson("links"), recentEchelons(), getJson("rounds?limit=15"),
    ]);
    if (health.topology !== topologyName) await loadTopology();
    updateLinks($("topology"), links);
    drawTimeline($("timeline"), echelons);
    showFlows(echelons);
    showRounds(rounds.rounds);
    $("scheduler-current").textContent = health.scheduler;
    const switches = health.switches ? `${health.switches.connected}/${health.switches.expected} switches · ` : "";
    setStatus(`${switches}${health.counts.active} active flows · updated ${clock(Date.now() / 1000)}`, false);
    $("status").dataset.polls = ++polls;
  } catch (err) {
    setStatus(`controller unreachable, retrying: ${err.message}`, true);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

// Every recent EchelonFlow: the API answers a page at a time, so follow next_cursor to the last page.
async function recentEchelons() {
  const path = `echelons?recent_s=${RECENT_S}&limit=${PAGE_LIMIT}`;
  const view = await getJson(path);
  for (let page = view; page.next_cursor; ) {
    page = await getJson(`${path}&cursor=${encodeURIComponent(page.next_cursor)}`);
    view.echelons.push(...page.echelons);
  }
  return view;
}

async function loadTopology() {
  const topology = await getJson("topology");
  topologyName = topology.name;
  $("topology-name").textContent = topology.name;
  drawTopology($("topology"), topology);
  const { scheduler, available } = await getJson("scheduler");
  $("scheduler-select").replaceChildren(...available.map((name) => new Option(name, name, false, name === scheduler)));
}

function showFlows(view) {
  const now = view.now_s;
  const flows = view.echelons.flatMap((e) => e.flows).filter((f) => f.state !== "declared");
  flows.sort((a, b) => (a.state === b.state ? 0 : a.state === "active" ? -1 : 1));
  $("flows").tBodies[0].replaceChildren(...flows.map((f) => row([
    `${f.job_id}/${f.flow_id}`, f.echelon_id, `${f.src}→${f.dst}`, f.state,
    { text: f.size_bytes ? `${((100 * f.bytes_done_estimate) / f.size_bytes).toFixed(0)} %` : "?", num: true },
    { text: f.queue ?? "", num: true }, { text: mbps(f.rate_bps), num: true },
    { text: mbps(f.meter_rate_bps), num: true }, relative(f.ideal_finish_s, now),
    f.state === "finished" ? relative(f.finish_s, now) : relative(f.estimated_finish_s, now),
  ], { "data-flow": `${f.job_id}/${f.flow_id}`, "data-queue": f.queue ?? "" })));
}

function showRounds(rounds) {
  $("rounds").tBodies[0].replaceChildren(...rounds.map((r) => row([
    clock(r.now_s), r.reason, r.scheduler, { text: r.active_flows, num: true },
    { text: (r.decide_s * 1e3).toFixed(2), num: true }, { text: (r.enforce_s * 1e3).toFixed(2), num: true },
    `${r.installs} / ${r.updates} / ${r.removes}`, r.error,
  ])));
}

async function switchScheduler(event) {
  event.preventDefault();
  const token = $("token").value.trim();
  sessionStorage.setItem("echelon-token", token);
  const scheduler = $("scheduler-select").value;
  const message = $("scheduler-message");
  try {
    const answer = await getJson("scheduler?wait_s=5", {
      method: "PUT", headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
      body: JSON.stringify({ scheduler }),
    });
    const { installs, updates, removes } = answer.pushed;
    const inForce = answer.enforcement && answer.enforcement.in_force ? "in force" : "not yet acknowledged";
    message.textContent = `now ${answer.scheduler}: ${installs} installs, ${updates} updates, ${removes} removes, ${inForce}`;
    message.className = "message ok";
    $("scheduler-current").textContent = answer.scheduler;
  } catch (err) {
    message.textContent = `refused: ${err.message}`;
    message.className = "message error";
  }
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "status error" : "status";
}

const clock = (s) => new Date(s * 1000).toLocaleTimeString([], { hour12: false });
const relative = (t, now) => (t === null || t === undefined ? "" : t >= now ? `in ${(t - now).toFixed(1)} s` : `${(now - t).toFixed(1)} s ago`);

$("token").value = sessionStorage.getItem("echelon-token") ?? "";
$("scheduler-form").addEventListener("submit", switchScheduler);
poll();
