// EchelonFlows as a timeline: one row per flow, bars against ideal finish times (the paper's Fig. 2).
import { svg } from "./dom.js";

const ROW = 16, LABEL = 150, PAD = 24;

export function drawTimeline(root, view) {
  root.replaceChildren();
  const { now_s: now, echelons } = view;
  const flows = echelons.flatMap((e) => e.flows);
  if (!flows.length) {
    root.setAttribute("height", 30);
    svg("text", { x: 4, y: 20, class: "row-label" }, root, "no EchelonFlow has started in the last minute");
    return;
  }
  const starts = flows.flatMap((f) => [f.start_s, f.ideal_finish_s]).filter((t) => t !== null);
  const t0 = Math.min(now, ...starts);
  const horizon = now + Math.max(10, now - t0); // estimates further out than this are cut at the edge
  const ends = flows.flatMap((f) => [f.finish_s, f.ideal_finish_s, f.estimated_finish_s]).filter((t) => t !== null);
  const t1 = Math.min(horizon, Math.max(now, ...ends)) + 1;
  const width = root.clientWidth || 800;
  const x = (t) => LABEL + ((Math.min(t, t1) - t0) / (t1 - t0)) * (width - LABEL - 10);
  const height = PAD + (flows.length + echelons.length) * ROW + 4;
  root.setAttribute("height", height);

  const axis = svg("g", { class: "axis" }, root);
  const step = niceStep((t1 - t0) / 8);
  for (let t = 0; x(t0 + t) < width - 30; t += step) {
    svg("line", { x1: x(t0 + t), x2: x(t0 + t), y1: PAD - 6, y2: height }, axis);
    svg("text", { x: x(t0 + t) + 2, y: 12 }, axis, `+${t.toFixed(step < 1 ? 1 : 0)} s`);
  }
  let y = PAD;
  for (const ech of echelons) {
    const tardy = ech.tardiness_estimate_s;
    const label = `${ech.job_id}/${ech.echelon_id} (${ech.kind}) tardiness ${tardy === null ? "?" : tardy.toFixed(2) + " s"}`;
    svg("text", { x: 2, y: y + 12, class: "group-label", "data-echelon": `${ech.job_id}/${ech.echelon_id}` }, root, label);
    y += ROW;
    for (const f of ech.flows) {
      drawFlow(root, f, y, x, now);
      y += ROW;
    }
  }
  svg("line", { class: "now", x1: x(now), x2: x(now), y1: PAD - 6, y2: height }, root);
}

function drawFlow(root, f, y, x, now) {
  const g = svg("g", { class: "flow", "data-flow": `${f.job_id}/${f.flow_id}`, "data-state": f.state,
                       "data-done": f.bytes_done_estimate }, root);
  svg("text", { x: 12, y: y + 11, class: "row-label" }, g, `${f.flow_id} ${f.src}→${f.dst}`);
  if (f.start_s !== null) {
    const end = f.finish_s ?? now;
    const cls = f.state === "finished" ? "bar finished" : `bar q${Math.min(3, f.queue ?? 0)}`;
    svg("rect", { class: cls, x: x(f.start_s), y: y + 3, height: ROW - 6,
                  width: Math.max(1, x(end) - x(f.start_s)) }, g);
    if (f.state === "active" && f.estimated_finish_s !== null) {
      svg("rect", { class: "estimate", x: x(now), y: y + 3, height: ROW - 6,
                    width: Math.max(0, x(f.estimated_finish_s) - x(now)) }, g);
    }
  }
  if (f.ideal_finish_s !== null) {
    const late = (f.finish_s ?? f.estimated_finish_s ?? now) > f.ideal_finish_s;
    const cx = x(f.ideal_finish_s), cy = y + ROW / 2;
    svg("path", { class: late ? "ideal late" : "ideal", d: `M${cx} ${cy - 6}l5 6l-5 6l-5 -6z` }, g);
  }
  const done = f.size_bytes ? (100 * f.bytes_done_estimate) / f.size_bytes : 0;
  svg("title", {}, g, `${f.job_id}/${f.flow_id}: ${f.state}, ${done.toFixed(0)} % of ${f.size_bytes} bytes, queue ${f.queue ?? "-"}`);
}

function niceStep(raw) {
  const base = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-3)));
  return [1, 2, 5, 10].map((m) => m * base).find((s) => s >= raw);
}
