// The topology as layers of switches above their hosts; links coloured by utilisation.
import { svg } from "./dom.js";

// Top to bottom: core/spine, aggregation/leaf, edge (or a plain switch), hosts.
const ROW_OF_LAYER = { core: 0, spine: 0, agg: 1, leaf: 1, edge: 2, switch: 2 };

export function drawTopology(root, topology) {
  root.replaceChildren();
  const width = root.clientWidth || 800, height = root.clientHeight || 340;
  const rows = new Map();
  for (const node of topology.nodes) {
    const r = node.kind === "host" ? 3 : ROW_OF_LAYER[node.layer] ?? 2;
    if (!rows.has(r)) rows.set(r, []);
    rows.get(r).push(node);
  }
  const used = [...rows.keys()].sort();
  const at = {};
  used.forEach((r, i) => {
    const y = 20 + (i * (height - 40)) / Math.max(1, used.length - 1);
    rows.get(r).forEach((node, j, all) => { at[node.name] = [((j + 0.5) * width) / all.length, y]; });
  });
  const links = svg("g", {}, root);
  for (const { a, b, rate_bps } of topology.links) {
    const [x1, y1] = at[a], [x2, y2] = at[b];
    svg("line", { class: "link", x1, y1, x2, y2, "stroke-width": 1.5, "data-a": a, "data-b": b,
                  "data-capacity": rate_bps }, links);
  }
  for (const node of topology.nodes) {
    const [x, y] = at[node.name];
    const g = svg("g", { class: `node ${node.kind}`, "data-name": node.name }, root);
    if (node.kind === "host") svg("rect", { x: x - 4, y: y - 4, width: 8, height: 8 }, g);
    else svg("circle", { cx: x, cy: y, r: 7 }, g);
    svg("text", { x, y: node.kind === "host" ? y + 16 : y - 10 }, g, node.name);
    svg("title", {}, g, node.kind === "host" ? `${node.name} ${node.ip}` : `${node.name} dpid ${node.dpid}`);
  }
}

// links: the /v1/links answer; each drawn edge shows its busier direction.
export function updateLinks(root, links) {
  const bps = new Map(links.links.map((l) => [`${l.src}>${l.dst}`, l]));
  for (const line of root.querySelectorAll("line.link")) {
    const { a, b, capacity } = line.dataset;
    const both = [bps.get(`${a}>${b}`), bps.get(`${b}>${a}`)].filter(Boolean);
    const rate = (l) => (links.measured ? l.measured_bps ?? 0 : l.scheduled_bps);
    const busiest = Math.max(0, ...both.map(rate));
    const util = busiest / Number(capacity);
    line.dataset.bps = busiest;
    line.setAttribute("class", `link ${util >= 0.8 ? "high" : util >= 0.4 ? "mid" : util >= 0.01 ? "low" : ""}`);
    line.setAttribute("stroke-width", 1.5 + 6 * Math.min(1, util));
    line.replaceChildren();
    const text = both.map((l) => `${l.src}→${l.dst} ${(rate(l) / 1e6).toFixed(2)} Mbit/s`).join("\n");
    svg("title", {}, line, `${text}\n(${links.measured ? "measured" : "scheduled"}, capacity ${capacity / 1e6} Mbit/s)`);
  }
}
