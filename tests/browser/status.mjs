// Opens fjord's status page (the admin listener's `/`) in headless Debian
// chromium and waits until it shows the session named by --session: its
// row in the sessions table, the engine threads, the storage layer's disks
// and a throughput chart with a line. Prints one JSON line of what the page shows and exits 0
// only if all of it appeared; a screenshot goes to --shot.
//
//   node status.mjs --url http://127.0.0.1:PORT/ --session ID --shot FILE

import { chromium } from "playwright-core";
import { parseArgs } from "node:util";

const { values: opt } = parseArgs({
  options: {
    url: { type: "string" },
    session: { type: "string" },
    shot: { type: "string" },
    "timeout-s": { type: "string", default: "30" },
  },
});
if (!opt.url || !opt.session || !opt.shot) {
  console.error("usage: node status.mjs --url URL --session ID --shot FILE");
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  // No sandbox as root; nothing of Google's reached from a closed network.
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let shown = { found: false };
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 800 } });
  const errors = [];
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(opt.url);
  const deadline = Date.now() + Number(opt["timeout-s"]) * 1000;
  while (Date.now() < deadline) {
    shown = await page.evaluate(read, opt.session);
    if (shown.found && shown.chart_points > 1 && shown.disks.length > 0) break;
    await page.waitForTimeout(500);
  }
  await page.screenshot({ path: opt.shot, fullPage: true });
  shown.errors = errors;
} finally {
  await browser.close();
}
console.log(JSON.stringify(shown));
process.exit(shown.found && shown.chart_points > 1 && shown.threads > 0 && shown.disks.length > 0 && !shown.errors.length ? 0 : 1);

// Runs in the page.
function read(id) {
  const row = document.querySelector(`#sessions tr[data-session="${id}"]`);
  const rate = document.querySelector("#chart #rate");
  return {
    found: !!row,
    cells: row ? [...row.cells].map((c) => c.textContent) : [],
    threads: document.querySelectorAll("#threads tbody tr").length,
    disks: [...document.querySelectorAll("#disks tbody tr")].map((r) => [...r.cells].map((c) => c.textContent)),
    storage_memory: document.getElementById("storage-memory").textContent,
    chart_points: rate ? rate.getAttribute("points").trim().split(/\s+/).filter(Boolean).length : 0,
    summary: document.getElementById("summary").textContent,
    error: document.getElementById("error").textContent,
  };
}
