// Tiny DOM helpers shared by the dashboard's modules.
const SVG_NS = "http://www.w3.org/2000/svg";

// An SVG element with attributes and optional text, appended to parent when given.
export function svg(tag, attrs = {}, parent = null, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

// A table row of cells; a cell is a string or {text, num: true} for right-aligned numbers.
export function row(cells, attrs = {}) {
  const tr = document.createElement("tr");
  for (const [name, value] of Object.entries(attrs)) tr.setAttribute(name, value);
  for (const cell of cells) {
    const td = document.createElement("td");
    const { text, num } = typeof cell === "object" && cell !== null ? cell : { text: cell, num: false };
    td.textContent = text ?? "";
    if (num) td.className = "num";
    tr.appendChild(td);
  }
  return tr;
}

export const mbps = (bps) => (bps === null || bps === undefined ? "" : (bps / 1e6).toFixed(2));
