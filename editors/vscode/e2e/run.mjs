// The real-VS-Code test. Starts the dsh mock provider, installs the packaged extension into
// code-server (VS Code's server build) together with the test-only driver extension (`driver/`,
// packaged by `npm run package:e2e-driver`, never shipped), opens the workbench in headless
// Chromium, and lets the driver (`DSH_E2E_RESULTS`) drive the extension through the scenario of
// issue 7 against the real daemon, from outside: its commands and the test API its `activate()`
// returns. The harness plays the user where a person would click: "Allow" on the approval
// notification, "Rewind" in the rewind's dialog. Then it checks what the page shows (the transcript webview's per-step usage and
// cost, the session's cost, the status bar), takes a screenshot, prints every check and `N passed, N failed`, and exits non-zero
// on failure.
//
// Usage: node e2e/run.mjs --vsix dsh-vscode.vsix --driver e2e/driver/dsh-vscode-e2e-driver.vsix
//        --dsh /path/to/dsh [--screenshot out.png] [--keep] [--timeout 300]

import { Buffer } from "node:buffer";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { deflateSync } from "node:zlib";
import { chromium } from "playwright-core";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = parseArgs(process.argv.slice(2));
const vsix = path.resolve(args.vsix ?? path.join(here, "..", "dsh-vscode.vsix"));
const driverVsix = path.resolve(args.driver ?? path.join(here, "driver", "dsh-vscode-e2e-driver.vsix"));
const dsh = path.resolve(args.dsh ?? process.env.DSH_BIN ?? path.join(here, "../../../target/debug/dsh"));
const timeoutS = Number(args.timeout ?? 300);
const codeServer = path.join(here, "node_modules/code-server/out/node/entry.js");
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";

/** The picture the scenario attaches to a prompt: its size is what the page must show. */
const IMAGE = { width: 96, height: 64 };

const checks = [];
const children = [];
/** The home of the daemon the extension starts (`dsh stdio` starts `dsh serve`), stopped at the end. */
let daemonHome = "";
let runDir = "";
const log = (...a) => console.log(`[e2e ${new Date().toISOString().slice(11, 19)}]`, ...a);

function check(name, ok, detail = "") {
  checks.push({ name, ok: !!ok, detail });
}

async function main() {
  for (const [what, p] of [["the packaged extension", vsix], ["the packaged e2e driver (npm run package:e2e-driver)", driverVsix], ["dsh", dsh], ["code-server", codeServer], ["chromium", chromiumPath]]) {
    if (!existsSync(p)) {
      throw new Error(`${what} not found at ${p}`);
    }
  }
  const run = mkdtempSync(path.join(tmpdir(), "dsh-vscode-e2e-"));
  runDir = run;
  log(`run directory ${run}`);
  const home = path.join(run, "home");
  daemonHome = home;
  const ws = path.join(run, "workspace");
  const ud = path.join(run, "user-data");
  const ext = path.join(run, "extensions");
  const results = path.join(run, "results.json");
  for (const d of [home, path.join(ws, "src"), path.join(ud, "User"), ext, path.join(run, "config")]) {
    mkdirSync(d, { recursive: true });
  }
  writeFileSync(path.join(ws, "src/greet.sh"), '#!/bin/sh\necho "Helo, $1!"\n');
  writeFileSync(path.join(ws, "AGENTS.md"), "# Project notes\n\nShell scripts use /bin/sh, not bash.\n");
  // A prompt command, for the prompt box's `/` completion (commandFromPalette).
  mkdirSync(path.join(ws, ".dsh/commands"), { recursive: true });
  writeFileSync(path.join(ws, ".dsh/commands/review.md"), "---\ndescription: Reviews a file\nargument-hint: FILE\n---\nReview $ARGUMENTS.\n");
  // The picture the scenario attaches (outside the workspace, as a screenshot would be).
  const image = path.join(run, "pixels.png");
  writeFileSync(image, pngImage(IMAGE.width, IMAGE.height));
  // A second one, attached from the prompt box's button (attachFromPalette).
  const secondImage = path.join(run, "dots.png");
  writeFileSync(secondImage, pngImage(12, 8));

  // The mock provider.
  const mock = spawn(dsh, ["--home", path.join(run, "mock-home"), "mock", "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
  children.push(mock);
  const mockUrl = await waitForLine(mock, /listening on (http:\/\/127\.0\.0\.1:\d+)/, 20_000, "dsh mock");
  log(`mock at ${mockUrl}`);
  // The user's configuration (under XDG_CONFIG_HOME): besides the default profile, one at the
  // mock whose model reads images, for the scenario's session with a picture.
  mkdirSync(path.join(run, "config/dsh"), { recursive: true });
  writeFileSync(
    path.join(run, "config/dsh/config.toml"),
    `[providers.vision]\nkind = "openai-compatible"\nbase_url = "${mockUrl}"\napi_key_env = "DEEPSEEK_API_KEY"\nmodel = "mock-vision"\n\n` +
      `[providers.vision.models.mock-vision]\ncontext_window = 131072\nmax_output = 4096\nthinking = false\nimages = true\n`,
    { mode: 0o600 },
  );

  writeFileSync(
    path.join(ud, "User/settings.json"),
    JSON.stringify(
      {
        "dsh.path": dsh,
        "dsh.home": home,
        "dsh.baseUrl": mockUrl,
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": false,
        "workbench.welcomePage.walkthroughs.openOnInstall": false,
        "workbench.colorTheme": "Default Dark Modern",
        "security.workspace.trust.enabled": false,
        "telemetry.telemetryLevel": "off",
        "extensions.autoCheckUpdates": false,
        "extensions.autoUpdate": false,
        "update.mode": "none",
        "chat.disableAIFeatures": true,
        "window.zoomLevel": 0,
        "editor.minimap.enabled": false,
        "diffEditor.renderSideBySide": true,
        "diffEditor.useInlineViewWhenSpaceIsLimited": false,
        "diffEditor.hideUnchangedRegions.enabled": false,
      },
      null,
      2,
    ),
  );

  const env = {
    ...process.env,
    DEEPSEEK_API_KEY: "sk-test",
    DSH_E2E_RESULTS: results,
    DSH_E2E_MOCK: mockUrl,
    DSH_E2E_IMAGE: image,
    XDG_CONFIG_HOME: path.join(run, "config"),
    XDG_DATA_HOME: path.join(run, "data"),
  };
  const csArgs = ["--user-data-dir", ud, "--extensions-dir", ext];

  log("installing the extension into code-server");
  const install = spawnSync(process.execPath, [codeServer, ...csArgs, "--install-extension", vsix], { env, encoding: "utf8", timeout: 120_000 });
  check("the packaged extension installs into code-server", install.status === 0, (install.stdout + install.stderr).trim().split("\n").slice(-2).join(" "));
  if (install.status !== 0) {
    throw new Error(`--install-extension failed:\n${install.stdout}\n${install.stderr}`);
  }
  // The driver depends on the extension (`extensionDependencies`): installed after it.
  const driver = spawnSync(process.execPath, [codeServer, ...csArgs, "--install-extension", driverVsix], { env, encoding: "utf8", timeout: 120_000 });
  if (driver.status !== 0) {
    throw new Error(`--install-extension of the e2e driver failed:\n${driver.stdout}\n${driver.stderr}`);
  }

  const port = await freePort();
  const cs = spawn(
    process.execPath,
    [codeServer, ...csArgs, "--auth", "none", "--bind-addr", `127.0.0.1:${port}`, "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override", ws],
    // Its own process group: the workbench's helpers (extension host, file watcher, pty host)
    // are stopped with it.
    { env, stdio: ["ignore", "pipe", "pipe"], detached: true },
  );
  children.push(cs);
  let csLog = "";
  cs.stdout.on("data", (b) => (csLog += b));
  cs.stderr.on("data", (b) => (csLog += b));
  await waitForLine(cs, /HTTP server listening/, 60_000, "code-server");
  log(`code-server on 127.0.0.1:${port}`);

  const browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = await browser.newPage({ viewport: { width: 1680, height: 1050 }, deviceScaleFactor: 1 });
  page.on("pageerror", (e) => log(`page error: ${e.message}`));
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(ws)}`, { waitUntil: "domcontentloaded", timeout: 60_000 });
  await page.locator(".monaco-workbench").waitFor({ timeout: 60_000 });
  check("the workbench opens in headless Chromium", true);
  log("workbench open; the driver runs the scenario");

  // Play the user until the scenario is done: click "Allow" when dsh asks.
  const deadline = Date.now() + timeoutS * 1000;
  let clicked = 0;
  let rewindClicks = 0;
  const toasts = new Set();
  let state = { done: false, checks: [] };
  let lastPhase = "";
  let imageChecked = false;
  const shot = args.screenshot ? path.resolve(args.screenshot) : path.join(run, "screenshot.png");
  while (Date.now() < deadline) {
    state = readJson(results) ?? state;
    if (state.phase && state.phase !== lastPhase) {
      lastPhase = state.phase;
      log(`scenario: ${lastPhase}`);
    }
    if (state.done) {
      break;
    }
    // The scenario's picture is in a transcript: check it in the page (and click it), then let
    // the scenario go on.
    if (state.expectImage && !imageChecked) {
      imageChecked = true;
      await checkImage(page, state.expectImage, shot.replace(/\.png$/, "") + "-image.png");
      writeFileSync(`${results}.image-checked`, "checked\n");
    }
    for (const m of await page.locator(".notifications-toasts .notification-list-item-message").allInnerTexts().catch(() => [])) {
      toasts.add(m.trim());
    }
    const toast = page.locator(".notifications-toasts .notification-toast", { hasText: "dsh wants to run" });
    if ((await toast.count()) > 0) {
      const allow = toast.first().getByRole("button", { name: "Allow", exact: true });
      if ((await allow.count()) > 0) {
        const text = (await toast.first().locator(".notification-list-item-message").innerText().catch(() => "")).trim();
        await allow.first().click();
        clicked++;
        log(`clicked Allow on "${text}"`);
      }
    }
    // The rewind's modal dialog: the files it changes, then "Rewind".
    const dialog = page.locator(".monaco-dialog-box", { hasText: "Rewind the files and the conversation to before step" });
    if ((await dialog.count()) > 0) {
      const rewind = dialog.first().getByRole("button", { name: "Rewind", exact: true });
      if ((await rewind.count()) > 0) {
        const text = (await dialog.first().innerText().catch(() => "")).trim().replace(/\s+/g, " ");
        await rewind.first().click();
        rewindClicks++;
        log(`clicked Rewind on "${text}"`);
      }
    }
    await sleep(250);
  }
  check("the scenario finished in time", state.done, state.done ? "" : `stuck at phase ${state.phase ?? "(not started)"}; code-server log tail:\n${csLog.slice(-3000)}`);
  check("the approval notification appeared and Allow was clicked in the page", clicked >= 1, `${clicked} click(s)`);
  check("the rewind's dialog listed the files and Rewind was clicked in the page", rewindClicks === 1, `${rewindClicks} click(s)`);
  for (const c of state.checks ?? []) {
    check(`vscode: ${c.name}`, c.ok, c.ok ? `${c.detail}${c.ms ? ` (${c.ms} ms)` : ""}` : c.detail);
  }

  check("the scenario showed a picture in a transcript for the page to check", imageChecked);
  if (state.expectImageRefusal) {
    const found = [...toasts].find((t) => t.includes(state.expectImageRefusal));
    check("a picture sent to a model that reads none: the daemon's refusal shows in a notification", found !== undefined, found ?? `seen: ${[...toasts].join(" | ")}`);
  }
  if (state.expectToast) {
    const found = [...toasts].find((t) => t.includes(state.expectToast));
    check("the start-up error shows in a notification, naming the setting to change", found && found.includes("dsh.path"), found ?? `seen: ${[...toasts].join(" | ")}`);
  }
  if (state.expect) {
    await checkPage(page, state.expect);
  }
  if (state.expectPlan) {
    await checkPlan(page, state.expectPlan);
  }

  await arrangeForScreenshot(page);
  await page.screenshot({ path: shot });
  log(`screenshot ${shot}`);

  // The step diff from the command palette, as a person runs it: F1, the command, a step.
  const diffShot = shot.replace(/\.png$/, "") + "-diff.png";
  await diffFromPalette(page, diffShot);
  await commandFromPalette(page, state.expect?.sessionId);
  await attachFromPalette(page, image, secondImage);
  await reloadRestoresTranscript(page, state.expect);
  if (state.expectChild) {
    await openChildFromPage(page, state.expectChild);
  } else {
    check("the scenario named a sub-agent to open from the page", false);
  }

  await browser.close();
}

/** What the user sees: the transcript webview's usage badges (with each step's cost, computed
 * here from its usage and the prices the daemon used), the session's cost and the status bar. */
async function checkPage(page, expect) {
  const frame = await findFrame(page, "#main section.step", 20_000);
  check("the transcript webview renders in the page", frame !== undefined);
  if (!frame) {
    return;
  }
  await frame.locator(`[data-usage="${expect.usage.rows.at(-1)?.step ?? 1}"]`).first().waitFor({ timeout: 10_000 }).catch(() => undefined);
  let mismatches = [];
  let total = 0;
  const currency = expect.usage.prices[0]?.price.currency ?? "USD";
  for (const row of expect.usage.rows) {
    if (!row.usage) {
      continue;
    }
    const used = expect.usage.prices.find((p) => p.profile === (row.profile ?? "deepseek") && p.model === row.model);
    const cost = used ? costOf(row.usage, used.price) : undefined;
    total += cost ?? 0;
    const badge = frame.locator(`[data-usage="${row.step}"]`).first();
    const text = (await badge.count()) ? (await badge.innerText()).replace(/\s+/g, " ").trim() : "(missing)";
    const want = [
      `${fmt(row.usage.promptTokens)} prompt`,
      `${fmt(row.usage.cacheHitTokens)} cached`,
      `${fmt(row.usage.cacheMissTokens)} new`,
      `${fmt(row.usage.completionTokens)} out`,
      `${row.hitPercent.toFixed(1)}% hit`,
      ...(cost === undefined ? [] : [`${money(cost, used.price.currency)} cost`]),
    ].join(" · ");
    if (text !== want) {
      mismatches.push(`step ${row.step}: page shows "${text}", session/usage says "${want}"`);
    }
  }
  check("the page shows each step's usage and cost equal to session/usage at its prices", mismatches.length === 0, mismatches.join("; ") || `${expect.usage.rows.length} steps`);
  const totals = frame.locator("[data-totals]").first();
  const totalsText = (await totals.count()) ? (await totals.innerText()).replace(/\s+/g, " ").trim() : "(missing)";
  check("the page shows the session's cost", expect.usage.prices.length > 0 && totalsText.endsWith(`${money(total, currency)} cost`), `${totalsText}; the usage at the prices: ${money(total, currency)}`);
  const body = await frame.locator("#main").innerText();
  check("the page shows where the steering landed", /landed in step \d+/.test(body));
  await checkNote(frame);
  const status = page.locator(".statusbar-item", { hasText: "dsh" }).first();
  const statusText = (await status.count()) ? (await status.innerText()).trim() : "";
  check("the status bar shows the step and the session totals", statusText.includes("Σ prompt") && statusText.includes("step"), statusText);
}

/** The picture attached to the scenario's prompt, in its session's transcript: an `<img>` whose
 * `data:` URL decoded to the picture's own size (not merely an element), sized to fit, with its
 * name, type and size under it (a screenshot, `file`); a click on it opens it full size in an
 * editor tab. */
async function checkImage(page, { sessionId, sha256, name, size }, file) {
  const selector = `#main header.session[data-session="${sessionId}"]`;
  const frame = await findFrame(page, selector, 20_000);
  if (!frame) {
    check("the picture's session shows in a transcript webview", false, `no transcript of ${sessionId}`);
    return;
  }
  try {
    const img = frame.locator(`figure.image.loaded img[data-sha256="${sha256}"]`).first();
    await img.waitFor({ timeout: 15_000 });
    let shown = { complete: false, width: 0, height: 0, src: "", boxWidth: 0, mainWidth: 0 };
    for (let i = 0; i < 40 && !(shown.complete && shown.width > 0); i++) {
      shown = await img.evaluate((el) => ({
        complete: el.complete,
        width: el.naturalWidth,
        height: el.naturalHeight,
        src: (el.getAttribute("src") ?? "").slice(0, 40),
        boxWidth: el.getBoundingClientRect().width,
        mainWidth: document.getElementById("main").getBoundingClientRect().width,
      }));
      await sleep(250);
    }
    check(
      "the prompt's picture shows inline in the transcript at its own size, from a data: URL",
      shown.width === IMAGE.width && shown.height === IMAGE.height && shown.src.startsWith("data:image/png;base64,") && shown.boxWidth > 0 && shown.boxWidth <= shown.mainWidth,
      `natural ${shown.width}×${shown.height} (want ${IMAGE.width}×${IMAGE.height}), shown ${Math.round(shown.boxWidth)} px wide in ${Math.round(shown.mainWidth)}; src ${shown.src}…`,
    );
    const caption = (await frame.locator(`figure[data-image="${sha256}"] figcaption`).first().innerText()).trim();
    check("the picture's caption names it, its media type and size", caption.startsWith(`${name} · image/png · `) && caption.endsWith(size), caption);
    await page.mouse.move(900, 1045);
    await page.screenshot({ path: file });
    log(`screenshot ${file}`);
    await clickInTranscript(frame.locator(`figure[data-image="${sha256}"] button.image-open`).first());
    const stem = name.replace(/\.png$/, "");
    const tab = page.locator(".tabs-container .tab", { hasText: `${stem}-${sha256.slice(0, 12)}.png` }).first();
    const opened = await tab.waitFor({ timeout: 15_000 }).then(() => true, () => false);
    check("a click on the picture opens it full size in an editor tab", opened, opened ? await tab.innerText() : "no tab");
  } catch (e) {
    check("the prompt's picture shows inline in the transcript", false, e instanceof Error ? e.message : String(e));
  }
}

/** A real PNG of `width` × `height` RGB pixels: a gradient any decoder shows. */
function pngImage(width, height) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) {
      c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    }
    return c >>> 0;
  });
  const crc32 = (bytes) => {
    let c = ~0;
    for (const b of bytes) {
      c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
    }
    return ~c >>> 0;
  };
  const chunk = (type, data) => {
    const body = Buffer.concat([Buffer.from(type, "ascii"), data]);
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    body.copy(out, 4);
    out.writeUInt32BE(crc32(body), 8 + data.length);
    return out;
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  const rows = Buffer.alloc(height * (1 + width * 3));
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      rows.set([Math.round((x * 255) / (width - 1)), Math.round((y * 255) / (height - 1)), 160], y * (1 + width * 3) + 1 + x * 3);
    }
  }
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk("IHDR", ihdr), chunk("IDAT", deflateSync(rows)), chunk("IEND", Buffer.alloc(0))]);
}

/** The current plan, pinned in the transcript's header above the turns: its headline and one
 * line per step with its status. */
async function checkPlan(page, headline) {
  const frame = await findFrame(page, "#main header [data-plan]", 20_000);
  if (!frame) {
    check("the page shows the plan pinned in the transcript's header", false, "no [data-plan] in the header");
    return;
  }
  const plan = frame.locator("#main header [data-plan]").first();
  const text = (await plan.innerText()).replace(/\s+/g, " ").trim();
  const statuses = await plan.locator("[data-status]").evaluateAll((els) => els.map((e) => e.getAttribute("data-status")));
  check(
    "the page shows the plan pinned in the transcript's header, each step with its status",
    text.includes(headline) && JSON.stringify(statuses) === JSON.stringify(["completed", "in_progress"]),
    `${text}; ${JSON.stringify(statuses)}`,
  );
}

/** The AGENTS.md edit between the turns: one line in the page, naming the step it joined; the
 * note's text (what the model reads) folded under it, shown by a click on the line. */
async function checkNote(frame) {
  const line = "AGENTS.md changed: joins the next request as a note";
  try {
    const notes = frame.locator(".msg.note", { hasText: line });
    const count = await notes.count();
    const note = notes.first();
    const summary = count ? (await note.locator("summary").innerText()).replace(/\s+/g, " ").trim() : "(missing)";
    check("the page shows the AGENTS.md note once, with the step it joined", count === 1 && summary.includes(`${line} joined step 4`), `${count} × "${summary}"`);
    if (count !== 1) {
      return;
    }
    const text = note.locator("pre.note-text");
    const hidden = !(await text.isVisible());
    await clickInTranscript(note.locator("summary"));
    await text.waitFor({ state: "visible", timeout: 5000 }).catch(() => undefined);
    const shown = (await text.isVisible()) ? await text.innerText() : "";
    check("a click on the note's line shows the note the model reads", hidden && shown.includes("Every script takes the name to greet as $1."), `hidden before: ${hidden}; shown: ${shown.slice(0, 120)}`);
  } catch (e) {
    check("the page shows the AGENTS.md note", false, e instanceof Error ? e.message : String(e));
  }
}

/** Wider sidebar (the tree's usage descriptions fit), transcript scrolled to the steering. */
async function arrangeForScreenshot(page) {
  try {
    const sidebar = await page.locator(".part.sidebar").boundingBox();
    if (sidebar) {
      const edge = sidebar.x + sidebar.width;
      for (const sash of await page.locator(".monaco-sash.vertical").all()) {
        const box = await sash.boundingBox().catch(() => null);
        if (box && box.height > sidebar.height / 2 && Math.abs(box.x + box.width / 2 - edge) < 6) {
          const x = box.x + box.width / 2;
          const y = box.y + box.height / 2;
          await page.mouse.move(x, y);
          await page.mouse.down();
          await page.mouse.move(x + 40, y, { steps: 4 });
          await page.mouse.move(x + 200, y, { steps: 10 });
          await page.mouse.up();
          break;
        }
      }
    }
    const frame = await findFrame(page, "#main section.step", 5000);
    await frame?.evaluate(() => {
      const anchor = document.querySelector(".msg.steering") ?? document.querySelector("section.step");
      const header = document.querySelector("header.session");
      if (anchor) {
        window.scrollTo(0, anchor.getBoundingClientRect().top + window.scrollY - (header?.offsetHeight ?? 0) - 12);
      }
    });
  } catch (e) {
    log(`arranging the screenshot: ${e instanceof Error ? e.message : e}`);
  }
  await page.mouse.move(900, 1045);
  await sleep(1200);
}

/** "dsh: Prompt" from the palette, as a person runs it: typing `/re` in the prompt box offers
 * the workspace's `/review` command (its description beside it); Escape sends nothing. */
async function commandFromPalette(page, sessionId) {
  try {
    const input = await runFromPalette(page, "dsh: Prompt", /^dsh: Prompt/);
    // The prompt box; first the session picker when no session is the active one (the diff
    // editor had the focus): the scenario's session is picked there, as a person would.
    const box = page.locator(".quick-input-widget", { hasText: "Prompt dsh" }).first();
    const picker = page.locator(".quick-input-widget input.input[placeholder='dsh session']").first();
    await box.or(picker).waitFor({ timeout: 10_000 });
    if (!(await box.isVisible().catch(() => false))) {
      if (!sessionId) {
        throw new Error("the session picker opened and the scenario named no session");
      }
      await input.fill(sessionId);
      await page.locator(".quick-input-list .monaco-list-row", { hasText: sessionId }).first().waitFor({ timeout: 10_000 });
      await page.keyboard.press("Enter");
      await box.waitFor({ timeout: 10_000 });
    }
    await input.fill("/re");
    const row = page.locator(".quick-input-list .monaco-list-row", { hasText: "/review" }).first();
    await row.waitFor({ timeout: 10_000 });
    const text = (await row.innerText()).replace(/\s+/g, " ");
    check("the prompt box completes `/re` to the workspace's /review command, with its description", text.includes("/review") && text.includes("Reviews a file"), text);
    await page.keyboard.press("Escape");
  } catch (e) {
    const shown = await page.locator(".quick-input-widget").first().innerText({ timeout: 1000 }).catch(() => "(no quick input)");
    check("the prompt box completes `/re` to the workspace's /review command", false, `${e instanceof Error ? e.message : String(e)}\nthe quick input showed: ${shown.replace(/\s+/g, " ").slice(0, 300)}`);
  }
}

/** "dsh: Prompt with Image…" from the palette, as a person runs it: the file dialog (in the
 * browser, VS Code's own) takes the picture's path; the prompt box's title then says what is
 * attached; its "Attach image…" button opens the dialog again for a second one, and the title
 * lists both. Escape sends nothing. */
async function attachFromPalette(page, first, second) {
  const name = "dsh: Prompt with Image… from the palette: the file dialog, then the prompt box lists what is attached; its Attach image… button adds another";
  try {
    const input = await runFromPalette(page, "dsh: Prompt with Image", "Prompt with Image");
    await pickInFileDialog(page, input, first);
    const box = page.locator(".quick-input-widget", { hasText: "Prompt dsh" }).first();
    await box.locator(".quick-input-title", { hasText: "1 image attached: pixels.png" }).waitFor({ timeout: 15_000 });
    const button = box.locator('.quick-input-titlebar [aria-label="Attach image…"], .quick-input-titlebar [title="Attach image…"]').first();
    await button.click({ timeout: 10_000 });
    await pickInFileDialog(page, input, second);
    const title = box.locator(".quick-input-title", { hasText: "2 images attached: pixels.png, dots.png" });
    const both = await title.waitFor({ timeout: 15_000 }).then(() => true, () => false);
    const text = (await box.locator(".quick-input-title").first().innerText().catch(() => "")).trim();
    check(name, both, text);
    await page.keyboard.press("Escape");
  } catch (e) {
    // What the quick input showed, for the failure's detail (and the page, kept in the run).
    const shown = (await page.locator(".quick-input-widget").first().innerText().catch(() => "")).replace(/\s+/g, " ").slice(0, 300);
    await page.screenshot({ path: path.join(runDir, "attach-failure.png") }).catch(() => undefined);
    check(name, false, `${e instanceof Error ? e.message.split("\n")[0] : String(e)}; the quick input: ${shown}`);
    await page.keyboard.press("Escape").catch(() => undefined);
  }
}

/** VS Code's own file dialog (a quick input holding a path, its button "Attach"): the file's
 * path typed into it once it has settled on its folder, then the button. */
async function pickInFileDialog(page, input, file) {
  const dialog = page.locator(".quick-input-widget", { hasText: "Attach images to the prompt" }).first();
  await dialog.waitFor({ timeout: 15_000 });
  await page.waitForFunction(() => document.querySelector(".quick-input-widget input.input")?.value.endsWith("/"), undefined, { timeout: 15_000 });
  await sleep(1000);
  for (let attempt = 0; attempt < 3 && (await input.inputValue()) !== file; attempt++) {
    await input.fill(file);
    await sleep(1000);
  }
  await dialog.locator(".monaco-button", { hasText: "Attach" }).first().click({ timeout: 5000 });
}

/** Runs `command` from the command palette as a person does: focus the workbench (not a
 * webview: a click on the side bar's title), open the palette, type, wait for the row, Enter.
 * Under load the palette can close again before it is typed into (a late focus change closes
 * it), so a closed palette is reopened, up to four times; the last failure is thrown. Returns
 * the quick input's text box. */
async function runFromPalette(page, command, row) {
  const input = page.locator(".quick-input-widget input.input").first();
  let last;
  for (let attempt = 0; attempt < 4; attempt++) {
    try {
      if (!(await input.isVisible().catch(() => false))) {
        // The side bar's title: a click there runs nothing (a row of the Sessions tree would
        // open a transcript, whose webview takes the focus and closes the palette).
        await page.locator(".part.sidebar .composite.title").first().click({ position: { x: 12, y: 12 } }).catch(() => undefined);
        await page.keyboard.press(attempt % 2 === 1 ? "F1" : "Control+Shift+P");
        await input.waitFor({ state: "visible", timeout: 5000 });
      }
      await input.fill(`>${command}`, { timeout: 5000 });
      await page.locator(".quick-input-list .monaco-list-row", { hasText: row }).first().waitFor({ timeout: 10_000 });
      await page.keyboard.press("Enter");
      return input;
    } catch (e) {
      last = e;
      log(`the palette for "${command}" (attempt ${attempt + 1}): ${e instanceof Error ? e.message.split("\n")[0] : e}`);
      await page.keyboard.press("Escape").catch(() => undefined);
      await sleep(500);
    }
  }
  throw last;
}

/** Clicks an element of the transcript webview the way a person would reach it: scrolled to sit
 * just below the sticky session header (which covers whatever is under it), then clicked. */
async function clickInTranscript(locator) {
  await locator.evaluate((el) => {
    const header = document.querySelector("header.session");
    window.scrollTo(0, el.getBoundingClientRect().top + window.scrollY - (header?.offsetHeight ?? 0) - 24);
  });
  await locator.click();
}

async function diffFromPalette(page, file) {
  try {
    // The step picker, which a late focus change (the transcript's webview taking the focus
    // under load) closes like the palette: then the command runs again, up to three times.
    for (let attempt = 0; ; attempt++) {
      try {
        const input = await runFromPalette(page, "dsh: Diff Request with Previous Step", "Diff Request with Previous Step");
        await page.locator(".quick-input-list .monaco-list-row", { hasText: "Step 4" }).first().waitFor({ timeout: 10_000 });
        await input.fill("Step 4", { timeout: 5000 });
        await sleep(300);
        await page.keyboard.press("Enter");
        break;
      } catch (e) {
        if (attempt === 2) {
          throw e;
        }
        log(`the step picker of the diff (attempt ${attempt + 1}): ${e instanceof Error ? e.message.split("\n")[0] : e}`);
        await page.keyboard.press("Escape").catch(() => undefined);
        await sleep(500);
      }
    }
    const modified = page.locator(".monaco-diff-editor .editor.modified");
    await modified.first().waitFor({ timeout: 15_000 });
    await page.locator(".monaco-diff-editor .line-insert").first().waitFor({ timeout: 10_000 });
    // Give the diff the editor area (Toggle Maximized Editor Group), side by side.
    await sleep(500);
    await page.keyboard.press("Control+K");
    await page.keyboard.press("Control+M");
    await sleep(1500);
    // Monaco renders spaces as no-break spaces.
    const left = (await page.locator(".monaco-diff-editor .editor.original .view-lines").first().innerText()).replace(/\u00a0/g, " ");
    const right = (await page.locator(".monaco-diff-editor .editor.modified .view-lines").first().innerText()).replace(/\u00a0/g, " ");
    check(
      "the palette's step diff opens VS Code's diff view: step 3's request against step 4's, whose header the AGENTS.md edit left alone",
      /step 3 \(turn 1\)/.test(left) && /step 4 \(turn 2\)/.test(right) && right.includes("header events: none (carried forward)"),
      right.split("\n").find((l) => l.startsWith("header events")) ?? right.slice(0, 120),
    );
    await page.mouse.move(900, 1045);
    await page.screenshot({ path: file });
    log(`screenshot ${file}`);
  } catch (e) {
    check("the palette's step diff opens VS Code's diff view", false, e instanceof Error ? e.message : String(e));
  }
}

/** A window reload: VS Code restores the transcript panel, which resubscribes from seq 0. */
async function reloadRestoresTranscript(page, expect) {
  const name = "after a window reload the transcript is restored with every step's usage";
  try {
    // Un-maximize the diff's group so the transcript is visible again, then reload.
    await page.keyboard.press("Control+K");
    await page.keyboard.press("Control+M");
    await sleep(1000);
    await page.reload({ waitUntil: "domcontentloaded" });
    await page.locator(".monaco-workbench").waitFor({ timeout: 60_000 });
    const frame = await findFrame(page, "#main [data-usage]", 30_000);
    if (!frame || !expect) {
      check(name, false, frame ? "no expectation from the scenario" : "no transcript webview after the reload");
      return;
    }
    const wantBadges = expect.usage.rows.filter((r) => r.usage).length;
    let shown = 0;
    for (let i = 0; i < 60 && shown < wantBadges; i++) {
      shown = await frame.locator("[data-usage]").count();
      await sleep(250);
    }
    const body = (await frame.locator("#main").innerText()).replace(/\s+/g, " ");
    const last = expect.usage.rows.filter((r) => r.usage).at(-1);
    const want = `${fmt(last.usage.promptTokens)} prompt`;
    check(name, shown >= wantBadges && body.includes(want), `${shown} usage badges; step ${last.step}: ${want}`);
    const line = "AGENTS.md changed: joins the next request as a note";
    check("after the reload the AGENTS.md note shows once, with the step it joined", body.split(line).length === 2 && body.includes(`${line} joined step 4`), body.includes(line) ? "" : "missing");
  } catch (e) {
    check(name, false, e instanceof Error ? e.message : String(e));
  }
}

/** The sub-agent's line in its parent's transcript: its "open" button, clicked in the page, opens
 * the child's own transcript. */
async function openChildFromPage(page, { parentId, childId }) {
  const name = "a click on the sub-agent's line in the page opens the child's own transcript";
  try {
    const button = `#main [data-child="${childId}"] button[data-action="openChild"]`;
    const frame = await findFrame(page, button, 20_000);
    if (!frame) {
      check(name, false, `no open button for ${childId} in ${parentId}'s transcript`);
      return;
    }
    await clickInTranscript(frame.locator(button).first());
    const child = await findFrame(page, `#main header[data-session="${childId}"]`, 20_000);
    const body = child ? (await child.locator("#main").innerText()).replace(/\s+/g, " ") : "";
    check(name, child !== undefined && body.includes("CHILD-ANSWER: the script is fine."), child ? body.slice(0, 160) : "the child's transcript did not open");
  } catch (e) {
    check(name, false, e instanceof Error ? e.message : String(e));
  }
}

async function findFrame(page, selector, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    for (const f of page.frames()) {
      try {
        if ((await f.locator(selector).count()) > 0) {
          return f;
        }
      } catch {
        // A frame detached while we looked.
      }
    }
    await sleep(250);
  }
  return undefined;
}

function fmt(n) {
  return Math.round(n).toLocaleString("en-US");
}

/** A step's cost (docs/config.md): hits, misses and output at their prices per million tokens. */
function costOf(usage, price) {
  return (usage.cacheHitTokens * price.cacheHit + (usage.promptTokens - usage.cacheHitTokens) * price.cacheMiss + usage.completionTokens * price.output) / 1_000_000;
}

/** Money as `dsh usage` prints it: to the millionth, trailing zeros cut down to two decimals. */
function money(amount, currency) {
  let digits = amount.toFixed(6);
  while (digits.endsWith("0") && digits.length > digits.indexOf(".") + 3) {
    digits = digits.slice(0, -1);
  }
  return currency === "USD" ? `$${digits}` : `${digits} ${currency}`;
}

function readJson(p) {
  try {
    return JSON.parse(readFileSync(p, "utf8"));
  } catch {
    return undefined;
  }
}

function waitForLine(child, re, ms, what) {
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`${what} did not start within ${ms / 1000} s:\n${out}`)), ms);
    const on = (b) => {
      out += b;
      const m = re.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1] ?? m[0]);
      }
    };
    child.stdout.on("data", on);
    child.stderr.on("data", on);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code}:\n${out}`));
    });
  });
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

function parseArgs(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith("--")) {
      const key = a.slice(2);
      const next = argv[i + 1];
      if (next === undefined || next.startsWith("--")) {
        out[key] = true;
      } else {
        out[key] = next;
        i++;
      }
    }
  }
  return out;
}

let exitCode = 1;
try {
  await main();
} catch (e) {
  check("the harness ran", false, e instanceof Error ? (e.stack ?? e.message) : String(e));
} finally {
  if (daemonHome) {
    spawnSync(dsh, ["--home", daemonHome, "shutdown"], { timeout: 15_000 });
  }
  for (const c of children.reverse()) {
    try {
      if (c.spawnargs.includes("--auth")) {
        process.kill(-c.pid, "SIGTERM");
      } else if (c.exitCode === null) {
        c.kill("SIGTERM");
      }
    } catch {
      // Already gone.
    }
  }
  if (runDir) {
    if (!args.keep && checks.every((c) => c.ok)) {
      await sleep(500);
      rmSync(runDir, { recursive: true, force: true });
    } else {
      log(`kept ${runDir}`);
    }
  }
  for (const c of checks) {
    console.log(`${c.ok ? "ok  " : "FAIL"} ${c.name}${c.detail ? ` — ${c.detail}` : ""}`);
  }
  const passed = checks.filter((c) => c.ok).length;
  const failed = checks.length - passed;
  console.log(`e2e: ${passed} passed, ${failed} failed`);
  exitCode = failed === 0 && passed > 0 ? 0 : 1;
}
process.exit(exitCode);
