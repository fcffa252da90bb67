// The viewer in a real browser (headless Chromium) against a real daemon and the mock:
// log in through the URL `dsh web` printed; open a session while a turn runs and see its steps
// arrive; steer it from the page and find the steering in the next request; the chart's bar
// per step and the drop after a system-prompt change with its cause; "what the model saw" at a
// step and its diff; the daemon restarted under the open page (it reconnects and catches up);
// a reused login link's page; no cookie, the cookie without the tab's secret, or a forged
// Origin refused; an image of a prompt shown inline, a missing one as a placeholder. Takes the
// README's screenshots. Prints `N passed, N failed`.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { crc32, deflateSync } from "node:zlib";
import { browser, environment, until } from "./harness.mjs";

const repo = join(dirname(fileURLToPath(import.meta.url)), "../..");
const media = process.env.WEB_SCREENSHOTS ?? join(repo, "docs/media");
let passed = 0;
let failed = 0;
const results = [];

async function check(name, body) {
  const started = Date.now();
  try {
    await body();
    passed++;
    results.push(`ok   ${name} (${Date.now() - started} ms)`);
  } catch (error) {
    failed++;
    results.push(`FAIL ${name}: ${error instanceof Error ? error.stack : error}`);
  }
  console.log(results[results.length - 1]);
}

/** The path of the file named `name` under `dir`, searched depth first. */
function findFile(dir, name) {
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (entry === name) {
      return path;
    }
    if (statSync(path).isDirectory()) {
      const found = findFile(path, name);
      if (found) {
        return found;
      }
    }
  }
  return undefined;
}

/** A real PNG, `width` × `height`, RGB: a gradient. */
function png(width, height) {
  const chunk = (type, data) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    const typed = Buffer.concat([Buffer.from(type, "ascii"), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(typed));
    return Buffer.concat([length, typed, crc]);
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8; // bits per sample
  header[9] = 2; // RGB
  const rows = [];
  for (let y = 0; y < height; y++) {
    rows.push(0); // no filter
    for (let x = 0; x < width; x++) {
      rows.push(Math.round((255 * x) / width), Math.round((255 * y) / height), 160);
    }
  }
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([signature, chunk("IHDR", header), chunk("IDAT", deflateSync(Buffer.from(rows))), chunk("IEND", Buffer.alloc(0))]);
}

const agents = (marker) => `# Project notes\n\n${marker}\n\n${Array.from({ length: 120 }, (_, n) => `- rule ${n}: keep functions short and name things plainly.\n`).join("")}`;

const env = await environment();
const chrome = await browser();
try {
  const { workspace } = env;
  mkdirSync(join(workspace, ".dsh"), { recursive: true });
  writeFileSync(join(workspace, ".dsh/config.toml"), '[instructions]\non_edit = "rewrite"\n');
  writeFileSync(join(workspace, "AGENTS.md"), agents("Scripts use /bin/sh."));
  writeFileSync(join(workspace, "notes.txt"), "hello\n");
  // A profile whose model reads images (the mock answers it on the Anthropic API).
  writeFileSync(
    join(env.root, "config.toml"),
    `[providers.vision]\nkind = "anthropic"\nbase_url = "${env.mockUrl}"\napi_key_env = "DEEPSEEK_API_KEY"\nmodel = "mock-vision"\n\n` +
      "[providers.vision.models.mock-vision]\ncontext_window = 131072\nmax_output = 4096\nthinking = false\nimages = true\n",
  );

  const url = env.dsh("web", "--no-open", "--workspace", workspace).trim();
  const origin = new URL(url).origin;
  const context = await chrome.newContext({ viewport: { width: 1280, height: 720 } });
  const page = await context.newPage();
  const consoleErrors = [];
  page.on("console", (message) => {
    if (message.type() === "error") {
      consoleErrors.push(message.text());
    }
  });
  page.on("pageerror", (error) => consoleErrors.push(String(error)));

  // A turn that runs a while: step 1 (a tool call) and step 2 are held by the mock.
  await env.post("/_fake/script", [
    { reasoning: "Look at the notes.", delay_ms: 4000, tool_calls: [{ name: "read_file", arguments: '{"path":"notes.txt"}' }] },
    { reasoning: "Answer.", delay_ms: 1500, content: "The notes say hello." },
  ]);
  const turn = env.start("prompt", "--yes", "--workspace", workspace, "What do the notes say?");
  await until("the first request", async () => (await env.requests()).length >= 1);

  await check("log in through the printed URL; the list shows the running session", async () => {
    await page.goto(url);
    assert.equal(new URL(page.url()).pathname, "/");
    // The tab secret came in the fragment: it is in the origin's storage, not in the address.
    assert.equal(new URL(page.url()).hash, "");
    assert.match(await page.evaluate(() => localStorage.getItem("dsh.tabSecret")), /^[0-9a-f]{64}$/);
    const row = page.locator("tr.running");
    await row.waitFor({ timeout: 15_000 });
    assert.match(await row.innerText(), /What do the notes say\?/);
    assert.match(await row.innerText(), /running/);
  });

  let sessionId = "";
  let second;
  await check("open the session while its turn runs and see its steps arrive", async () => {
    await page.locator("tr.running a").click();
    sessionId = decodeURIComponent(new URL(page.url()).hash.replace("#/s/", ""));
    assert.ok(sessionId, page.url());
    await page.locator('[data-testid="status"][data-running="true"]').waitFor();
    await page.locator('li[data-type="step/start"]').first().waitFor();
    // The edit of AGENTS.md changes the system prompt of step 2 (the `rewrite` policy).
    writeFileSync(join(workspace, "AGENTS.md"), agents("Scripts use /bin/sh, never bash."));
  });

  await check("steer the running turn from the page; the steering lands in the next request (a second tab sees it land)", async () => {
    second = await context.newPage();
    await second.goto(page.url());
    await second.locator('[data-testid="status"][data-running="true"]').waitFor();
    await page.locator(".controls textarea").fill("STEER-FROM-THE-PAGE: answer in one line");
    assert.equal(await page.locator("button.send").innerText(), "Steer");
    await page.locator("button.send").click();
    await page.locator('li[data-type="steering/message"]').waitFor();
    const outcome = await turn.done;
    assert.equal(outcome.code, 0, outcome.err);
    const requests = await env.requests();
    assert.equal(requests.length, 2);
    assert.ok(!requests[0].body.includes("STEER-FROM-THE-PAGE"));
    assert.ok(requests[1].body.includes("STEER-FROM-THE-PAGE"), "the second request carries the steering");
    await until("the steering marked as joined", async () => (await page.locator('li[data-type="steering/message"] .landed').innerText()) === "joined step 2");
    await page.locator('li[data-type="step/start"] .joined', { hasText: "STEER-FROM-THE-PAGE" }).waitFor();
    await until("the second tab showing it joined", async () => (await second.locator('li[data-type="steering/message"] .landed').innerText()) === "joined step 2");
    // The first tab in front again (a background tab's animation frames are throttled).
    await page.bringToFront();
    await page.locator('li[data-type="turn/end"]').waitFor();
    await page.locator('[data-testid="status"][data-running="false"]').waitFor();
  });

  await check("the chart has one bar per step, and the drop after the system-prompt change carries its cause", async () => {
    const usage = JSON.parse(env.dsh("--json", "usage", sessionId));
    const steps = usage.rows.length;
    assert.equal(steps, 2);
    const chart = page.locator('[data-testid="chart"]');
    await until("the chart of every step", async () => (await chart.getAttribute("data-steps")) === String(steps));
    const bars = await chart.locator('path[data-series="prompt"]').getAttribute("d");
    assert.equal((bars.match(/M/g) ?? []).length, steps, bars);
    assert.equal(await chart.locator('path[data-series="drops"]').getAttribute("data-steps"), "2", "one drop, at step 2");
    const label = chart.locator('.drop-label[data-step="2"]');
    assert.match(await label.textContent(), /system prompt changed/);
    assert.match(await label.locator("title").textContent(), /step 2: cache dropped — system prompt changed at seq \d+/);
    // Keyboard: the chart picks steps with the arrow keys and says which.
    await chart.focus();
    await page.keyboard.press("End");
    assert.match(await page.locator(".chart figcaption").innerText(), /step 2 .*cache dropped: .*system prompt changed/);
  });

  await check("step 2's \"what the model saw\" and its diff against step 1", async () => {
    await page.keyboard.press("Enter");
    await until("step 2 shown", async () => (await page.locator(".saw").getAttribute("data-step")) === "2");
    const readable = await page.locator(".saw-body").innerText();
    assert.match(readable, /What do the notes say\?/);
    assert.match(readable, /STEER-FROM-THE-PAGE/);
    await page.getByRole("tab", { name: "wire JSON" }).click();
    const wire = await page.locator(".saw-body pre.wire").innerText();
    assert.ok(JSON.parse(wire).messages.length > 2, "the wire body is JSON with the messages");
    await page.getByRole("tab", { name: "diff vs previous step" }).click();
    const added = await page.locator(".saw-body .diff .add").allInnerTexts();
    assert.ok(added.some((line) => line.includes("never bash")), added.join(""));
    assert.ok(added.some((line) => line.includes("STEER-FROM-THE-PAGE")), added.join(""));
    const removed = await page.locator(".saw-body .diff .del").allInnerTexts();
    assert.ok(removed.some((line) => line.includes("Scripts use /bin/sh.")), removed.join(""));
    await page.getByRole("tab", { name: "what the model saw" }).click();
  });

  await check("screenshots of the session page and the chart", async () => {
    mkdirSync(media, { recursive: true });
    await page.screenshot({ path: join(media, "web-session.png") });
    await page.locator(".chart").screenshot({ path: join(media, "web-chart.png") });
  });

  await check("the daemon restarts under the open page: it reconnects and catches up", async () => {
    env.dsh("shutdown");
    await page.locator('[data-testid="connection"]', { hasText: "reconnecting" }).waitFor();
    // The next daemon's front takes the same port (recorded in the home).
    const again = env.dsh("web", "--no-open").trim();
    assert.equal(new URL(again).origin, origin);
    env.dsh("prompt", "--session", sessionId, "AFTER-THE-RESTART [[fake:say back again]]");
    await page.locator('li[data-type="user/message"]', { hasText: "AFTER-THE-RESTART" }).waitFor({ timeout: 20_000 });
    await page.locator('li[data-type="assistant/message"]', { hasText: "back again" }).waitFor();
    const seqs = await page.locator("li[data-seq]").evaluateAll((items) => items.map((item) => Number(item.getAttribute("data-seq"))));
    assert.equal(new Set(seqs).size, seqs.length, "no event shown twice");
    await until("the chart redrawn with step 3", async () => (await page.locator('[data-testid="chart"]').getAttribute("data-steps")) === "3");
  });

  await check("prompt from the page; its approval is answered in the other tab", async () => {
    await second.reload();
    await page.locator(".controls textarea").fill('write it down [[fake:tool write_file {"path":"from-the-page.txt","content":"written\\n"}]]');
    await page.locator(".controls textarea").press("Control+Enter");
    const allow = second.locator('li[data-type="approval/request"] button.approve-allow');
    await second.bringToFront();
    await allow.waitFor();
    assert.match(await second.locator('li[data-type="approval/request"]').textContent(), /write_file/);
    await allow.click();
    await page.bringToFront();
    await page.locator('li[data-type="approval/request"].decided').waitFor();
    await until("the turn's end", async () => (await page.locator('li[data-type="turn/end"]').count()) === 3);
    assert.equal(readFileSync(join(workspace, "from-the-page.txt"), "utf8"), "written\n");
    await second.close();
  });

  await check("pages of events: the last page first, earlier ones on demand, none twice", async () => {
    await page.goto(`${origin}/?page=20#/s/${encodeURIComponent(sessionId)}`);
    const earlier = page.locator("button.earlier");
    await earlier.waitFor();
    const seqs = () => page.locator(".transcript li[data-seq]").evaluateAll((items) => items.map((item) => Number(item.getAttribute("data-seq"))));
    const first = await seqs();
    assert.ok(Math.min(...first) >= 20, `only the last page: ${first}`);
    let pages = 0;
    while (await earlier.isVisible()) {
      const firstSeq = async () => Number(await page.locator(".transcript").getAttribute("data-first-seq"));
      const before = await firstSeq();
      await earlier.click();
      await until("an earlier page", async () => (await firstSeq()) < before);
      pages++;
      assert.ok(pages < 50, "paging does not end");
    }
    const all = await seqs();
    assert.ok(pages >= 2, `${pages} earlier pages`);
    assert.equal(Math.min(...all), 0, "back to session/meta");
    assert.equal(new Set(all).size, all.length, "no event twice");
    assert.deepEqual(all, [...all].sort((a, b) => a - b), "in log order");
  });

  await check("cancel a turn from the page; fork at a step picked in the chart", async () => {
    await page.goto(`${origin}/#/s/${encodeURIComponent(sessionId)}`);
    await env.post("/_fake/script", [{ delay_ms: 5000, content: "too late" }]);
    await page.locator(".controls textarea").fill("a slow one");
    await page.locator("button.send").click();
    await page.locator('[data-testid="status"][data-running="true"]').waitFor();
    await until("the slow request", async () => (await env.requests()).some((request) => request.body.includes("a slow one")));
    await page.locator("button.cancel").click();
    await page.locator('li[data-type="turn/end"].reason-cancelled').waitFor();
    await page.locator('[data-testid="status"][data-running="false"]').waitFor();
    // Fork at step 1: the chart picks it (Home), the fork opens.
    const chart = page.locator('[data-testid="chart"]');
    await chart.focus();
    await page.keyboard.press("Home");
    assert.equal(await page.locator(".step-label").innerText(), "step 1");
    await page.locator("button.fork").click();
    await until("the fork's page", async () => !page.url().endsWith(encodeURIComponent(sessionId)));
    const meta = page.locator('li[data-type="session/meta"]');
    await meta.waitFor();
    assert.match(await meta.innerText(), new RegExp(`fork of ${sessionId}`));
    assert.ok((await page.locator('li[data-type="assistant/message"]').count()) === 0, "a fork at step 1 keeps nothing of step 1's answer");
  });

  await check("an image of a prompt sent through the API is shown inline with its name, type and size; a missing one as a placeholder", async () => {
    const token = readFileSync(join(env.home, "token"), "utf8").trim();
    const api = async (method, params) => {
      const response = await fetch(origin, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
      });
      const answer = await response.json();
      if (answer.error) {
        throw new Error(`${method}: ${answer.error.message}`);
      }
      return answer.result;
    };
    const { sessionId: vision } = await api("session/create", { workspace, config: { profile: "vision" } });
    const image = png(160, 90);
    await api("session/prompt", {
      sessionId: vision,
      text: "What is in this picture? [[fake:say A gradient.]]",
      attachments: [{ data: image.toString("base64"), name: "gradient.png" }],
    });
    await page.goto(`${origin}/#/s/${encodeURIComponent(vision)}`);
    const row = page.locator('li[data-type="user/message"]');
    const img = row.locator("figure.image img");
    await img.waitFor();
    await until("the image decoded", () => img.evaluate((node) => node.complete && node.naturalWidth > 0));
    assert.deepEqual(await img.evaluate((node) => [node.naturalWidth, node.naturalHeight]), [160, 90]);
    assert.match(await img.getAttribute("src"), /^data:image\/png;base64,/);
    assert.equal(await img.getAttribute("alt"), "gradient.png");
    assert.ok(image.length > 1024 && image.length < 1024 * 1024, `${image.length} bytes: the caption below says KiB`);
    assert.equal(await row.locator("figcaption").innerText(), `gradient.png · image/png · ${(image.length / 1024).toFixed(1)} KiB`);
    await page.locator('li[data-type="assistant/message"]', { hasText: "A gradient." }).waitFor();
    await page.locator(".transcript").screenshot({ path: join(media, "web-image.png") });
    // Its bytes gone from the store: the same row says so where the image was.
    const sha256 = createHash("sha256").update(image).digest("hex");
    const object = findFile(env.home, sha256);
    assert.ok(object, "the image in the object store");
    rmSync(object);
    await page.reload();
    const missing = row.locator(".image-slot.missing");
    await missing.waitFor();
    assert.match(await missing.innerText(), /^image not available: .*cannot be read/);
    assert.match(await row.locator("figcaption").innerText(), /^gradient\.png · image\/png/);
    assert.equal(await row.locator("img").count(), 0);
  });

  await check("the list shows a log that cannot be read, with its error", async () => {
    const log = findFile(env.home, `${sessionId}.jsonl`);
    assert.ok(log, "the session's log");
    writeFileSync(join(dirname(log), "broken.jsonl"), "this is not JSON\n");
    await page.goto(`${origin}/#/`);
    const row = page.locator('tr.broken[data-session="broken"]');
    await row.waitFor();
    assert.match(await row.innerText(), /unreadable: .*line 1/);
    await page.locator(`tr[data-session="${sessionId}"]`).waitFor();
  });

  await check("dark mode: the session page in dark colours", async () => {
    // The logged-in browser's cookie and storage (the tab secret) in another context.
    const dark = await chrome.newContext({ viewport: { width: 1280, height: 720 }, colorScheme: "dark", storageState: await context.storageState() });
    const tab = await dark.newPage();
    await tab.goto(`${origin}/#/s/${encodeURIComponent(sessionId)}`);
    const steps = String(JSON.parse(env.dsh("--json", "usage", sessionId)).rows.length);
    await until("the chart", async () => (await tab.locator('[data-testid="chart"]').getAttribute("data-steps")) === steps);
    const background = await tab.evaluate(() => getComputedStyle(document.body).backgroundColor);
    assert.equal(background, "rgb(20, 23, 29)");
    await tab.screenshot({ path: join(media, "web-session-dark.png") });
    await dark.close();
  });

  await check("a reused login link gets a page that says so", async () => {
    const other = await chrome.newContext();
    const tab = await other.newPage();
    const response = await tab.goto(url);
    assert.equal(response.status(), 403);
    assert.match(await tab.locator("h1").innerText(), /already used/);
    assert.match(await tab.locator("body").innerText(), /dsh web/);
    await other.close();
  });

  await check("without the cookie nothing is served; the cookie without the tab secret, or with a forged Origin, is refused", async () => {
    const other = await chrome.newContext();
    const tab = await other.newPage();
    const response = await tab.goto(`${origin}/`);
    assert.equal(response.status(), 401);
    assert.match(await tab.locator("h1").innerText(), /Not logged in/);
    const script = await tab.request.get(`${origin}/app.js`);
    assert.equal(script.status(), 401);
    await other.close();
    // The logged-in browser's cookie, sent from another origin: refused.
    const cookies = await context.cookies(origin);
    const cookie = cookies.find((c) => c.name === "dsh_web");
    assert.ok(cookie?.httpOnly, "the cookie is HttpOnly");
    assert.equal(cookie?.sameSite, "Strict");
    const secret = await page.evaluate(() => localStorage.getItem("dsh.tabSecret"));
    const call = (from, withSecret = true) =>
      fetch(origin, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          cookie: `dsh_web=${cookie.value}`,
          ...(from ? { origin: from } : {}),
          ...(withSecret ? { "x-dsh-tab-secret": secret } : {}),
        },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "daemon/status", params: {} }),
      });
    assert.equal((await call("http://evil.example")).status, 403);
    assert.equal((await call(origin, false)).status, 403, "the cookie alone, the page's Origin forged");
    assert.equal((await call(origin)).status, 200);
    // A browser with the cookie but not the tab's secret (another local server's page got the
    // cookie, never the secret): the page is served, the daemon is not, and the page says why.
    const cookieOnly = await chrome.newContext();
    await cookieOnly.addCookies(cookies);
    const bare = await cookieOnly.newPage();
    assert.equal((await bare.goto(`${origin}/`)).status(), 200);
    const refused = bare.locator('[data-testid="connection"][data-state="refused"]');
    await refused.waitFor();
    assert.match(await refused.innerText(), /run `dsh web` again/);
    // A secret of another login (the next `dsh web`'s) with this cookie: refused too.
    const next = await chrome.newContext();
    const elsewhere = await next.newPage();
    await elsewhere.goto(env.dsh("web", "--no-open").trim());
    const otherSecret = await elsewhere.evaluate(() => localStorage.getItem("dsh.tabSecret"));
    assert.notEqual(otherSecret, secret);
    await bare.evaluate((value) => localStorage.setItem("dsh.tabSecret", value), otherSecret);
    await bare.reload();
    await refused.waitFor();
    await cookieOnly.close();
    await next.close();
    // The page itself cannot reach another origin: the policy forbids it.
    const blocked = await page.evaluate(async () => {
      try {
        await fetch("http://example.com/");
        return false;
      } catch {
        return true;
      }
    });
    assert.ok(blocked, "a fetch to another origin went through");
  });

  await check("the page logged no errors", async () => {
    const unexpected = consoleErrors.filter((text) => !/WebSocket|ERR_CONNECTION_REFUSED|example\.com|Content Security Policy|Failed to load resource/.test(text));
    assert.deepEqual(unexpected, []);
  });
  await context.close();
} finally {
  await chrome.close();
  env.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
