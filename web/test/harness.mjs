// What the browser tests share: the dsh binary, a mock provider, a private $DSH_HOME and
// workspace, `dsh web --no-open`, and headless Chromium (Debian's, never a downloaded one)
// driven by playwright-core.
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

export const DSH = process.env.DSH_BIN;
if (!DSH) {
  throw new Error("DSH_BIN must name the dsh binary");
}
export const KEY = "sk-test";

/** A mock, a home and a workspace; `dsh(...)` runs the CLI against them. */
export async function environment() {
  const root = realpathSync(mkdtempSync(join(tmpdir(), "dsh-web-test-")));
  const home = join(root, "home");
  const workspace = join(root, "workspace");
  mkdirSync(workspace, { recursive: true });
  const mock = spawn(DSH, ["mock", "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
  const mockUrl = await new Promise((resolve, reject) => {
    let seen = "";
    mock.stdout.on("data", (chunk) => {
      seen += chunk;
      const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(seen);
      if (match) {
        resolve(match[1]);
      }
    });
    mock.on("exit", (code) => reject(new Error(`dsh mock exited (${code})`)));
  });
  const env = { ...process.env, DEEPSEEK_API_KEY: KEY, DSH_CONFIG: join(root, "config.toml") };
  for (const name of ["DSH_HOME", "DSH_PROVIDER", "DSH_MODEL", "DEEPSEEK_BASE_URL", "DSH_LOG", "BROWSER"]) {
    delete env[name];
  }
  const args = (rest) => ["--home", home, "--base-url", mockUrl, ...rest];
  const dsh = (...rest) => {
    const result = spawnSync(DSH, args(rest), { cwd: workspace, env, encoding: "utf8" });
    if (result.status !== 0) {
      throw new Error(`dsh ${rest.join(" ")} failed (${result.status}): ${result.stderr}`);
    }
    return result.stdout;
  };
  /** `dsh ARGS…` started, not waited for. */
  const start = (...rest) => {
    const child = spawn(DSH, args(rest), { cwd: workspace, env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk) => (out += chunk));
    child.stderr.on("data", (chunk) => (err += chunk));
    const done = new Promise((resolve) => child.on("exit", (code) => resolve({ code, out, err })));
    return { child, done };
  };
  const post = async (path, body) => {
    const response = await fetch(`${mockUrl}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    if (!response.ok) {
      throw new Error(`${path}: ${response.status} ${await response.text()}`);
    }
  };
  const requests = async () => (await fetch(`${mockUrl}/_fake/requests`)).json();
  const close = () => {
    try {
      dsh("shutdown");
    } catch {
      // already gone
    }
    mock.kill();
    rmSync(root, { recursive: true, force: true });
  };
  return { root, home, workspace, mockUrl, dsh, start, post, requests, close };
}

/** Headless Chromium with the flags that work on these machines; playwright gives each launch
 * a fresh profile of its own (it refuses `--user-data-dir` with `launch`). */
export async function browser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

/** Polls `check` until it returns a truthy value (or throws after `ms`). */
export async function until(what, check, ms = 30_000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) {
        return last;
      }
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
