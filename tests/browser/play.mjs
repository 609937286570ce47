// Plays one of fjord's HLS or DASH URLs in headless Debian chromium with
// hls.js or dash.js, as a web page on another origin would: starts it,
// seeks to the middle once a second has played, and waits for the end.
// Prints one JSON line (what happened: `played_after_seek` is the furthest
// position reached once the seek was done) and exits 0 only if the video
// reached its end with no error event. A screenshot of the page at the
// end (the last frame) is written to --shot.
//
//   node play.mjs --player hls|dash --url URL --shot FILE [--timeout-s 60]
//                 [--max-buffer-s S] [--live-back-s S]
//
// --max-buffer-s: hls.js buffers at most S seconds ahead (default 30), so
// that it is still fetching segments while the test does something.
// --live-back-s: a live (growing) playlist or manifest: once S + 1 s
// have played, seek back S s and play on at twice the pace to the end,
// once the playlist has one (`live_at_seek`: hls.js still took it for
// live, dash.js the manifest for dynamic).
//
// `fetched` lists every segment and init segment the page received:
// URL, status and MD5 of the body, for the test to compare.

import { chromium } from "playwright-core";
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createHash } from "node:crypto";

const { values: opt } = parseArgs({
  options: {
    player: { type: "string" },
    url: { type: "string" },
    shot: { type: "string" },
    "timeout-s": { type: "string", default: "60" },
    "max-buffer-s": { type: "string" },
    "live-back-s": { type: "string" },
  },
});
// The players' browser builds, as files (their packages do not export them).
const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const libraries = {
  hls: here("node_modules/hls.js/dist/hls.min.js"),
  dash: here("node_modules/dashjs/dist/modern/umd/dash.all.min.js"),
};
if (!libraries[opt.player] || !opt.url || !opt.shot) {
  console.error("usage: node play.mjs --player hls|dash --url URL --shot FILE");
  process.exit(2);
}

const html = `<!doctype html><title>fjord ${opt.player}</title>
<body style="margin:0;background:#000"><video id="v" muted playsinline
 style="width:640px;height:360px"></video></body>`;

// The page is served from its own origin: not fjord's, so every request
// is cross-origin (CORS) as on a real site. On loopback too: chromium does
// not let a page from a less private network reach a loopback address.
const site = createServer((_, res) => {
  res.writeHead(200, { "content-type": "text/html" });
  res.end(html);
});
await new Promise((ok) => site.listen(0, "127.0.0.1", ok));
const PAGE = `http://127.0.0.1:${site.address().port}/player.html`;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  // No sandbox as root; nothing of Google's reached from a closed network.
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--autoplay-policy=no-user-gesture-required"],
});
let result;
try {
  const page = await browser.newPage({ viewport: { width: 640, height: 360 } });
  const console_errors = [];
  page.on("console", (m) => m.type() === "error" && console_errors.push(m.text()));
  const fetched = [];
  page.on("response", async (r) => {
    if (!/\/(seg-[^/]*|init(-\d+)?\.(mp4|webm))$/.test(new URL(r.url()).pathname)) return;
    const body = await r.body().catch(() => null);
    const md5 = body && createHash("md5").update(body).digest("hex");
    fetched.push({ url: r.url(), status: r.status(), md5 });
  });
  await page.goto(PAGE);
  await page.addScriptTag({ path: libraries[opt.player] });
  result = await page.evaluate(play, {
    player: opt.player,
    url: opt.url,
    timeoutMs: Number(opt["timeout-s"]) * 1000,
    maxBufferS: opt["max-buffer-s"] ? Number(opt["max-buffer-s"]) : null,
    liveBackS: opt["live-back-s"] ? Number(opt["live-back-s"]) : null,
  });
  await page.screenshot({ path: opt.shot });
  result.console_errors = console_errors;
  result.fetched = fetched;
} finally {
  await browser.close();
  site.close();
}
console.log(JSON.stringify(result));
process.exit(result.ended && result.errors.length === 0 ? 0 : 1);

// Runs in the page.
function play({ player, url, timeoutMs, maxBufferS, liveBackS }) {
  return new Promise((resolve) => {
    const v = document.getElementById("v");
    const r = { events: [], errors: [], ended: false, seeked_to: null, played_after_seek: null };
    const t0 = performance.now();
    const log = (e) => r.events.push(`${((performance.now() - t0) / 1000).toFixed(2)} ${e}`);
    const finish = () => {
      r.current_time = v.currentTime;
      r.duration = v.duration;
      r.frames = v.getVideoPlaybackQuality?.().totalVideoFrames ?? null;
      r.width = v.videoWidth;
      r.buffered = [...Array(v.buffered.length).keys()]
        .map((i) => [v.buffered.start(i), v.buffered.end(i)]);
      r.ready_state = v.readyState;
      r.paused = v.paused;
      resolve(r);
    };
    let hls = null;
    let dash = null;
    if (player === "hls") {
      hls = new Hls(maxBufferS === null ? {} :
        { maxBufferLength: maxBufferS, maxMaxBufferLength: maxBufferS });
      hls.on(Hls.Events.ERROR, (_, d) => {
        log(`hls error ${d.type} ${d.details} fatal=${d.fatal}`);
        if (d.fatal) { r.errors.push(`${d.type}: ${d.details}`); finish(); }
      });
      hls.loadSource(url);
      hls.attachMedia(v);
    } else {
      const p = dashjs.MediaPlayer().create();
      dash = p;
      p.on(dashjs.MediaPlayer.events.ERROR, (e) => {
        const msg = e.error?.message ?? JSON.stringify(e.error);
        log(`dash error ${msg}`);
        r.errors.push(msg);
        finish();
      });
      p.initialize(v, url, true);
    }
    v.addEventListener("error", () => { r.errors.push(`video: ${v.error?.message}`); finish(); });
    for (const e of ["loadedmetadata", "playing", "seeking", "seeked", "waiting", "pause", "ended"]) {
      v.addEventListener(e, () => log(`${e} at ${v.currentTime.toFixed(2)}`));
    }
    let seeked = false;
    v.addEventListener("seeked", () => { seeked = r.seeked_to !== null; });
    v.addEventListener("timeupdate", () => {
      if (seeked) r.played_after_seek = Math.max(r.played_after_seek ?? 0, v.currentTime);
      if (liveBackS !== null) {
        if (r.seeked_to === null && v.currentTime > liveBackS + 1) {
          r.live_at_seek = hls ? hls.levels[hls.currentLevel]?.details?.live ?? null
            : dash.isDynamic();
          r.seeked_from = v.currentTime;
          r.seeked_to = v.currentTime - liveBackS;
          v.currentTime = r.seeked_to;
          v.playbackRate = 2;
        }
        return;
      }
      if (r.seeked_to === null && v.currentTime > 1 && v.duration > 4) {
        r.seeked_to = v.duration / 2;
        v.currentTime = r.seeked_to;
      }
    });
    // The end is the element's `ended` state, or the element paused at
    // the title's duration. Under CPU load dash.js can pause the element
    // on its last frame without chromium ever firing `ended` (seen with
    // `ended` true, and with it false at currentTime == duration): the
    // viewer still saw it all. Which of the two is reported.
    const atEnd = () => {
      const last = v.paused && v.duration > 0 && v.currentTime >= v.duration - 0.05;
      if (r.ended || !(v.ended || last)) return;
      r.ended = true;
      r.end = v.ended ? "ended" : "paused at the duration";
      finish();
    };
    for (const e of ["ended", "pause", "timeupdate"]) v.addEventListener(e, atEnd);
    v.muted = true;
    // dash.js plays it itself (autoplay): a play() before it listens
    // would leave its manifest updates paused, a live manifest never
    // fetched again.
    if (hls) v.play().catch((e) => log(`play(): ${e}`));
    setTimeout(() => { r.errors.push("timed out before the end"); finish(); }, timeoutMs);
  });
}
