// Images: a prompt's attachment read from a file the way `dsh: Prompt with Image…` reads it,
// sent to the real daemon on a profile whose model reads images (the mock's `mock-vision`), the
// log holding its reference and never its bytes; the transcript showing it inline once fetched
// (`session/object`), and a placeholder with the daemon's words when it cannot be had; the
// daemon's refusals (a model that reads no images, bytes that are no image, too large) in its
// own words; a tool result's images from a log built out of the generated protocol types.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { DshClient, RpcError, describeError } from "../src/daemon";
import { ImageCache, attachedText, formatBytes, imageCaption, imageFileName, readAttachments } from "../src/images";
import { ErrorCodes, type LogEvent, type SessionEvent, type SessionObjectResult } from "../src/protocol.generated";
import { renderTranscript } from "../src/render";
import { MAX_LINE_BYTES, REQUEST_TOO_LONG } from "../src/rpc";
import { Transcript } from "../src/transcript";
import { Mock, cleanup, dshBin, hasStdio, makeWorkspace, pngImage, tempDir, until } from "./support";

/** JSON-RPC's invalid params: the daemon's refusal of an attachment. */
const INVALID_PARAMS = -32602;

const skip = hasStdio() ? false : "the dsh binary has no stdio subcommand";

/** A file of `bytes` in `dir`. */
function file(dir: string, name: string, bytes: Buffer): string {
  const p = path.join(dir, name);
  writeFileSync(p, bytes);
  return p;
}

function sha256(bytes: Buffer): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Every file under `dir` whose name ends with `suffix`. */
function filesUnder(dir: string, suffix: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(suffix))
    .map((e) => path.join(e.parentPath, e.name));
}

describe("images against the daemon and the mock", { skip }, () => {
  let mock: Mock;
  let home: string;
  let ws: string;
  let files: string;
  let client: DshClient;

  before(async () => {
    mock = await Mock.start();
    home = tempDir("imghome");
    ws = makeWorkspace();
    files = tempDir("imgfiles");
    // The user's file (`$DSH_CONFIG`): a profile at the mock whose model reads images.
    const config = path.join(home, "config.toml");
    writeFileSync(
      config,
      `[providers.vision]\nkind = "openai-compatible"\nbase_url = "${mock.url}"\napi_key_env = "DEEPSEEK_API_KEY"\nmodel = "mock-vision"\n\n` +
        `[providers.vision.models.mock-vision]\ncontext_window = 131072\nmax_output = 4096\nthinking = false\nimages = true\n`,
    );
    const env = { ...process.env, DEEPSEEK_API_KEY: "sk-test", DSH_CONFIG: config };
    client = await DshClient.start({ path: dshBin(), home: path.join(home, "state"), baseUrl: mock.url, inProcess: true, env, clientName: "dsh-vscode-test" });
  });

  after(async () => {
    client?.kill();
    await client?.waitExit();
    mock?.stop();
    cleanup(home, ws, files);
  });

  /** A session on the vision profile, and a transcript fed by its subscription from seq 0. */
  async function visionSession(): Promise<{ id: string; t: Transcript; dispose: () => Promise<void> }> {
    const { sessionId: id } = await client.createSession(ws, undefined, { profile: "vision" });
    const t = new Transcript(id);
    const sub = await client.subscribe(id, 0, (e) => t.apply(e));
    return { id, t, dispose: () => sub.dispose() };
  }

  test("an attached PNG reaches the daemon: the log names it by hash, the request carries it, the transcript shows it once fetched", async () => {
    const png = pngImage(48, 32);
    const shot = file(files, "screen shot.png", png);
    const { id, t, dispose } = await visionSession();
    try {
      await mock.reset();
      const attachments = await readAttachments([shot]);
      assert.deepEqual(attachments, [{ name: "screen shot.png", data: png.toString("base64") }]);
      const r = await client.prompt(id, "What is in this picture?", undefined, attachments);
      assert.equal(r.stopReason, "completed", JSON.stringify(r));

      // The log: the reference with its hash, size, media type and name; never the bytes.
      const [log] = filesUnder(path.join(home, "state"), `${id}.jsonl`);
      assert.ok(log, "the session's log");
      const text = readFileSync(log, "utf8");
      const prompt = text
        .split("\n")
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l) as LogEvent)
        .find((e) => e.type === "user/message");
      assert.ok(prompt && prompt.type === "user/message");
      assert.deepEqual(prompt.data.images, [{ sha256: sha256(png), size: png.length, mediaType: "image/png", name: "screen shot.png" }]);
      assert.ok(!text.includes(png.toString("base64").slice(0, 40)), "the image's bytes are not in the log");

      // The request the mock received carries the image (OpenAI-compatible: an image_url data URL).
      const requests = (await mock.requests()) as Array<{ body: string }>;
      const body = requests.at(-1)?.body ?? "";
      assert.ok(body.includes(`data:image/png;base64,${png.toString("base64")}`), "the request carries the image as a data URL");

      // The transcript: the prompt's entry names the image; rendered, it loads, then shows.
      await until(() => !t.running && t.entries.some((e) => e.kind === "turnEnd"), "the turn's end in the transcript");
      const entry = t.entries.find((e) => e.kind === "user");
      assert.ok(entry && entry.kind === "user");
      assert.deepEqual(entry.images, prompt.data.images);
      assert.deepEqual(t.images, prompt.data.images);
      let fetches = 0;
      const cache = new ImageCache((sessionId, sha) => {
        fetches++;
        return client.object(sessionId, sha);
      });
      const lookup = (ref: { sha256: string }) => cache.state(id, ref.sha256);
      const loading = renderTranscript(t, lookup);
      assert.ok(loading.includes(`data-image="${sha256(png)}" data-state="loading"`) && loading.includes("loading image…"), loading);
      assert.ok(loading.includes(`screen shot.png · image/png · ${formatBytes(png.length)}`), "the caption names the image, its type and size");
      const settled = new Promise<string>((resolve) => cache.onDidSettle((_s, sha) => resolve(sha)));
      assert.equal(await settled, sha256(png));
      const shown = renderTranscript(t, lookup);
      const figure = /<figure class="image loaded"[^]*?<\/figure>/.exec(shown)?.[0] ?? "";
      assert.ok(figure.includes(`<img data-sha256="${sha256(png)}" alt="screen shot.png">`), figure);
      assert.ok(figure.includes(`data-action="openImage" data-sha256="${sha256(png)}"`), "a click opens it full size");
      assert.ok(figure.includes(`<figcaption>screen shot.png · image/png · ${formatBytes(png.length)}</figcaption>`), figure);
      // Inside the prompt's message, after its text.
      const message = shown.slice(shown.indexOf(`class="msg user"`));
      assert.ok(message.indexOf("What is in this picture?") < message.indexOf("<figure"), "the image follows the prompt's text");
      const state = cache.state(id, sha256(png));
      assert.ok(state.kind === "loaded");
      assert.equal(state.mediaType, "image/png");
      assert.ok(Buffer.from(state.data, "base64").equals(png), "the bytes served are the file's");
      renderTranscript(t, lookup);
      assert.equal(fetches, 1, "fetched once, then kept");

      // Gone from the store: a placeholder with the daemon's words; the transcript is whole.
      const [object] = filesUnder(path.join(home, "state"), sha256(png));
      assert.ok(object, "the image is in the workspace's object store");
      rmSync(object);
      const fresh = new ImageCache((sessionId, sha) => client.object(sessionId, sha), describeError);
      assert.equal((await fresh.load(id, sha256(png))).kind, "missing");
      const broken = renderTranscript(t, (ref) => fresh.state(id, ref.sha256));
      const placeholder = /<figure class="image missing"[^]*?<\/figure>/.exec(broken)?.[0] ?? "";
      assert.ok(placeholder.includes("⚠ image not available:") && placeholder.includes("(objectNotFound)"), placeholder);
      assert.ok(placeholder.includes("screen shot.png · image/png"), "the placeholder still names the image");
      assert.ok(!placeholder.includes("<img"), placeholder);
      assert.ok(broken.includes("What is in this picture?") && broken.includes(`id="step-1"`) && broken.includes("Turn 1 completed"), "the rest of the transcript shows");
    } finally {
      await dispose();
    }
  });

  test("a hash the session's log does not name is the daemon's objectNotFound, kept per session", async () => {
    const { id, dispose } = await visionSession();
    try {
      const cache = new ImageCache((sessionId, sha) => client.object(sessionId, sha), describeError);
      const state = await cache.load(id, "0".repeat(64));
      assert.ok(state.kind === "missing");
      assert.ok(state.error.includes(`names no object ${"0".repeat(64)}`) && state.error.endsWith("(objectNotFound)"), state.error);
      await assert.rejects(client.object(id, "0".repeat(64)), (e: unknown) => e instanceof RpcError && e.code === ErrorCodes.objectNotFound);
    } finally {
      await dispose();
    }
  });

  test("a model that reads no images refuses the attachment in the daemon's words, and nothing is logged", async () => {
    const { sessionId: id } = await client.createSession(ws);
    const png = file(files, "dot.png", pngImage(4, 4));
    await assert.rejects(client.prompt(id, "What is this?", undefined, await readAttachments([png])), (e: unknown) => {
      assert.ok(e instanceof RpcError && e.code === INVALID_PARAMS, String(e));
      assert.ok(/model \S+ of profile \S+ does not read images/.test(e.message) && e.message.includes("nothing was logged"), e.message);
      return true;
    });
    const page = await client.events(id, 0, 100);
    assert.ok(!page.events.some((e: SessionEvent) => e.type === "user/message" || e.type === "turn/start"), "no prompt logged");
  });

  test("bytes that are no image and an image over the limit are refused in the daemon's words; a request over the line limit is refused here, unsent", async () => {
    const { id, t, dispose } = await visionSession();
    try {
      const text = file(files, "notes.png", Buffer.from("these are notes, not a picture\n"));
      await assert.rejects(client.prompt(id, "Look.", undefined, await readAttachments([text])), /notes\.png is not an image a model reads \(its first bytes are no PNG, JPEG, GIF or WebP signature/);
      // Over the daemon's 3,000,000 bytes, but its base64 fits in one request line.
      const big = pngImage(8, 8);
      const over = file(files, "big.png", pngImage(8, 8, 3_000_001 - big.length - 12));
      assert.equal(readFileSync(over).length, 3_000_001);
      await assert.rejects(client.prompt(id, "Look.", undefined, await readAttachments([over])), (e: unknown) => {
        assert.ok(e instanceof RpcError && e.code === INVALID_PARAMS, String(e));
        assert.ok(e.message.includes("3000000") || e.message.includes("3,000,000"), e.message);
        return true;
      });
      // Two images whose base64 is over the line the daemon reads: refused before it is sent
      // (the daemon's answer to an over-long line names no request: the caller would wait).
      const half = file(files, "half.png", pngImage(8, 8, 1_700_000));
      await assert.rejects(client.prompt(id, "Look.", undefined, await readAttachments([half, half])), (e: unknown) => {
        assert.ok(e instanceof RpcError && e.code === REQUEST_TOO_LONG, String(e));
        assert.ok(e.message.includes(`at most ${MAX_LINE_BYTES.toLocaleString("en-US")} bytes (4 MiB)`), e.message);
        return true;
      });
      // The connection is fine, and nothing was logged.
      const page = await client.events(id, 0, 100);
      assert.ok(!page.events.some((e) => e.type === "user/message"), "no prompt logged");
      assert.equal(t.entries.filter((e) => e.kind === "user").length, 0);
      // A missing file is this client's error, naming it.
      await assert.rejects(readAttachments([path.join(files, "gone.png")]), /cannot read the image .*gone\.png \(ENOENT\)/);
    } finally {
      await dispose();
    }
  });
});

function log(list: LogEvent[]): SessionEvent[] {
  return list.map((e, seq) => ({ sessionId: "imgs", seq, time: 0, ...e }));
}

test("a tool result's images show inside its result, open, after its text; the transcript lists every image in log order", () => {
  const prompt = { sha256: "a".repeat(64), size: 2048, mediaType: "image/jpeg", name: "diagram <1>.jpg" };
  const read = { sha256: "b".repeat(64), size: 1_500_000, mediaType: "image/webp" };
  const usage = { promptTokens: 1000, cacheHitTokens: 0, cacheMissTokens: 1000, completionTokens: 10, reasoningTokens: 0 };
  const t = new Transcript("imgs");
  t.applyAll(
    log([
      { type: "session/meta", data: { formatVersion: 0, sessionId: "imgs", workspace: "/w" } },
      { type: "turn/start", data: { turn: 1 } },
      { type: "user/message", data: { text: "compare", images: [prompt] } },
      { type: "step/start", data: { step: 1, turn: 1 } },
      { type: "assistant/message", data: { step: 1, message: { content: "", toolCalls: [{ id: "c1", name: "read_file", arguments: '{"path":"shot.webp"}' }] } } },
      { type: "tool/call", data: { step: 1, callId: "c1", name: "read_file" } },
      { type: "tool/result", data: { callId: "c1", name: "read_file", content: "shot.webp: an image (image/webp, 1500000 bytes)", images: [read] } },
      { type: "step/end", data: { step: 1, finishReason: "tool_calls", usage } },
    ] as LogEvent[]),
  );
  assert.deepEqual(t.images, [prompt, read]);
  const states = new Map<string, SessionObjectResult>([[read.sha256, { mediaType: "image/webp", size: read.size, data: "UklGRg==" }]]);
  const html = renderTranscript(t, (ref) => {
    const o = states.get(ref.sha256);
    return o ? { kind: "loaded", ...o } : { kind: "missing", error: "session imgs names no object (objectNotFound)" };
  });
  const result = /<details class="result "[^]*?<\/details>/.exec(html)?.[0] ?? "";
  assert.ok(/data-key="res-c1" open>/.test(result), "a result with images is open");
  assert.ok(result.indexOf("shot.webp: an image") < result.indexOf(`<img data-sha256="${read.sha256}"`), result);
  assert.ok(result.includes("<figcaption>image/webp · 1.5 MB</figcaption>"), result);
  // The prompt's image (not served here) is a placeholder; its name escaped.
  assert.ok(html.includes("diagram &lt;1&gt;.jpg · image/jpeg · 2.0 KB"), html);
  assert.ok(html.includes("⚠ image not available: session imgs names no object (objectNotFound)"), html);
  // With no lookup (a view that fetches none), every image is loading.
  assert.equal(renderTranscript(t).split(`data-state="loading"`).length - 1, 2);
});

test("the words and file names of images", () => {
  assert.equal(formatBytes(870), "870 B");
  assert.equal(formatBytes(40_000), "40.0 KB");
  assert.equal(formatBytes(3_000_000), "3.0 MB");
  assert.equal(imageCaption({ sha256: "c".repeat(64), size: 70, mediaType: "image/png" }), "image/png · 70 B");
  assert.equal(imageFileName({ sha256: "0123456789abcdef".repeat(4), mediaType: "image/jpeg", name: "../My Screen shot (2).JPG" }), "My_Screen_shot_2_-0123456789ab.jpg");
  assert.equal(imageFileName({ sha256: "f".repeat(64), mediaType: "image/gif" }), "ffffffffffff.gif");
  assert.equal(attachedText([]), "");
  assert.equal(attachedText(["/a/x.png"]), "1 image attached: x.png");
  assert.equal(attachedText(["/a/x.png", "/b/y.webp"]), "2 images attached: x.png, y.webp");
});
