// The page's time to first render on a long session (called by `cargo bench -p dsh --bench web`
// with a login URL, the session id, its step count and the number of runs): logs in, then
// loads the session's page RUNS + 1 times (the first loads the session into the daemon's
// cache, as the bench's first `dsh usage` does) and prints each time from navigation to the
// chart of every step and the first screen of the transcript drawn, then `median_ms N`.
// With WEB_BENCH_SCREENSHOT, a screenshot of the chart is written there.
import { browser } from "./harness.mjs";

const [url, session, steps, runs] = process.argv.slice(2);
const chrome = await browser();
try {
  const context = await chrome.newContext({ viewport: { width: 1280, height: 720 } });
  const page = await context.newPage();
  await page.goto(url);
  const origin = new URL(url).origin;
  const times = [];
  for (let run = 0; run <= Number(runs); run++) {
    await page.goto("about:blank");
    const started = Date.now();
    await page.goto(`${origin}/#/s/${encodeURIComponent(session)}`);
    await page.waitForFunction(
      (steps) => {
        const chart = document.querySelector('[data-testid="chart"]');
        const rows = document.querySelectorAll(".transcript li.event").length;
        return chart?.getAttribute("data-steps") === steps && rows > 10;
      },
      steps,
      { timeout: 120_000, polling: "raf" },
    );
    const elapsed = Date.now() - started;
    if (run > 0) {
      times.push(elapsed);
    }
    console.log(`page run ${run}${run === 0 ? " (loads the session)" : ""}: ${elapsed} ms`);
  }
  if (process.env.WEB_BENCH_SCREENSHOT) {
    await page.locator(".chart").screenshot({ path: process.env.WEB_BENCH_SCREENSHOT });
  }
  const nodes = await page.evaluate(() => ({
    svg: document.querySelectorAll('[data-testid="chart"] *').length,
    transcript: document.querySelectorAll(".transcript li").length,
  }));
  console.log(`DOM: ${nodes.svg} SVG nodes for the chart, ${nodes.transcript} transcript rows (the last page of events)`);
  times.sort((a, b) => a - b);
  console.log(`median_ms ${times[Math.floor(times.length / 2)]}`);
} finally {
  await chrome.close();
}
