// Test support: the real `dsh` binary, the real mock provider (`dsh mock`), temporary homes and
// workspaces. Nothing here fakes the daemon.

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { deflateSync } from "node:zlib";
import type { Price, Usage } from "../src/protocol.generated";

/** The dsh binary: `$DSH_BIN`, else the workspace's debug build. */
export function dshBin(): string {
  return process.env.DSH_BIN ?? path.resolve(__dirname, "../../../../target/debug/dsh");
}

/** Whether the binary has the `stdio` subcommand (the daemon has landed). */
export function hasStdio(): boolean {
  const r = spawnSync(dshBin(), ["--help"], { encoding: "utf8" });
  return r.status === 0 && /^\s+stdio\b/m.test(r.stdout);
}

export function tempDir(prefix: string): string {
  return mkdtempSync(path.join(tmpdir(), `dsh-vscode-${prefix}-`));
}

/** A small workspace with a file to read and a test script. */
export function makeWorkspace(): string {
  const ws = tempDir("ws");
  mkdirSync(path.join(ws, "src"));
  writeFileSync(path.join(ws, "src", "greet.sh"), '#!/bin/sh\necho "Helo, $1!"\n');
  writeFileSync(path.join(ws, "AGENTS.md"), "# Project notes\n\nShell scripts use /bin/sh.\n");
  return ws;
}

export type ScriptStep = {
  reasoning?: string;
  content?: string;
  tool_calls?: Array<{ name: string; arguments: unknown }>;
  delay_ms?: number;
  finish_reason?: string;
};

/** A running `dsh mock` on a free loopback port. */
export class Mock {
  private constructor(
    private readonly child: ChildProcess,
    readonly url: string,
    private readonly home: string,
  ) {}

  static async start(): Promise<Mock> {
    const home = tempDir("mockhome");
    const child = spawn(dshBin(), ["--home", home, "mock", "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      const timer = setTimeout(() => reject(new Error(`dsh mock did not start: ${out}`)), 15_000);
      const onData = (b: Buffer) => {
        out += b.toString();
        const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      };
      child.stdout!.on("data", onData);
      child.stderr!.on("data", onData);
      child.once("exit", (code) => reject(new Error(`dsh mock exited with ${code}: ${out}`)));
    });
    return new Mock(child, url, home);
  }

  /** Queues scripted responses, one per model request, consumed in order. */
  async script(steps: ScriptStep[]): Promise<void> {
    const r = await fetch(`${this.url}/_fake/script`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(steps) });
    if (!r.ok) {
      throw new Error(`POST /_fake/script: ${r.status} ${await r.text()}`);
    }
  }

  async reset(): Promise<void> {
    await fetch(`${this.url}/_fake/reset`, { method: "POST" });
  }

  /** The requests the mock received (exact bytes, for byte-for-byte checks). */
  async requests(): Promise<unknown[]> {
    const r = await fetch(`${this.url}/_fake/requests`);
    return (await r.json()) as unknown[];
  }

  stop(): void {
    this.child.kill("SIGTERM");
    rmSync(this.home, { recursive: true, force: true });
  }
}

export function cleanup(...dirs: string[]): void {
  for (const d of dirs) {
    rmSync(d, { recursive: true, force: true });
  }
}

/** Waits until `pred` holds (polling), or fails with `what`. */
export async function until(pred: () => boolean, what: string, ms = 15_000): Promise<void> {
  const start = Date.now();
  while (!pred()) {
    if (Date.now() - start > ms) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * A step's cost as docs/config.md defines it, computed here from its usage and the prices the
 * daemon said it used: cache hits at the hit price, misses at the miss price, output at the
 * output price, per million tokens; saved is the same step with every input token at the miss
 * price, minus the cost. The views must show these figures, not merely echo the daemon's.
 */
export function expectedCost(u: Usage, p: Price): { amount: number; saved: number } {
  const miss = u.promptTokens - u.cacheHitTokens;
  const output = u.completionTokens * p.output;
  const amount = (u.cacheHitTokens * p.cacheHit + miss * p.cacheMiss + output) / 1_000_000;
  const uncached = (u.promptTokens * p.cacheMiss + output) / 1_000_000;
  return { amount, saved: uncached - amount };
}

/** The repository's MCP test servers (`tests/mcp`, installed by `tests/mcp/install.sh`). */
export function mcpDir(): string {
  return path.resolve(__dirname, "../../../../tests/mcp");
}

/**
 * Whether `tests/mcp/fixture.py`'s PyPI `mcp` SDK is installed; a reason to skip the test when
 * it is not, unless `DSH_MCP_REQUIRED` is set (test-ci.sh installs it and sets it): then the
 * test runs, and fails.
 */
export function mcpFixtureSkip(): string | false {
  if (existsSync(path.join(mcpDir(), ".deps/py/mcp")) || process.env.DSH_MCP_REQUIRED) {
    return false;
  }
  return "the MCP fixture server is not installed (run tests/mcp/install.sh)";
}

/** A `[mcp.servers.NAME]` table running `tests/mcp/fixture.py` (its tools: echo, fail, …). */
export function mcpFixtureConfig(name: string, extra = ""): string {
  const dir = mcpDir();
  return (
    `[mcp.servers.${name}]\ncommand = "python3"\n` +
    `args = [${JSON.stringify(path.join(dir, "fixture.py"))}, "tools"]\n` +
    `env = { PYTHONPATH = ${JSON.stringify(path.join(dir, ".deps/py"))} }\n${extra}\n`
  );
}

/** The CRC-32 of PNG chunks (ISO 3309, as zlib's). */
function crc32(bytes: Buffer): number {
  let c = ~0;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; k++) {
      c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
    }
  }
  return ~c >>> 0;
}

/** A real PNG of `width` × `height` RGB pixels (a gradient that any decoder shows), padded with
 * a private ancillary chunk of `pad` bytes of noise (decoders skip it) to reach a size. */
export function pngImage(width: number, height: number, pad = 0): Buffer {
  const chunk = (type: string, data: Buffer) => {
    const head = Buffer.alloc(4);
    head.writeUInt32BE(data.length);
    const body = Buffer.concat([Buffer.from(type, "ascii"), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(body));
    return Buffer.concat([head, body, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  const rows = Buffer.alloc(height * (1 + width * 3));
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      rows.set([(x * 255) / Math.max(1, width - 1), (y * 255) / Math.max(1, height - 1), 128], y * (1 + width * 3) + 1 + x * 3);
    }
  }
  let seed = 12345;
  const noise = Buffer.alloc(pad);
  for (let i = 0; i < pad; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    noise[i] = seed >>> 24;
  }
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", ihdr),
    ...(pad ? [chunk("prVt", noise)] : []),
    chunk("IDAT", deflateSync(rows)),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}
