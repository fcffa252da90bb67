// Images: a prompt's attachment read from a file the way `dsh: Prompt with Image…` reads it,
// sent to the real daemon on a profile whose model reads images (the mock's `mock-vision`), the
// log holding its reference and never its bytes; the transcript showing it inline once fetched
// (`session/object`), and a placeholder with the daemon's words when it cannot be had; the
// daemon's refusals (a model that reads no images, bytes that are no image, too large) in its
// own words; a tool result's images from a log built out of the generated protocol types.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import * as vm from "node:vm";
import * as path from "node:path";
import { DshClient, RpcError, describeError } from "../src/daemon";
import { ImageCache, PageImages, attachedText, checkImageHash, formatBytes, imageCaption, imageFileName, promptSession, readAttachments, writeImageFile } from "../src/images";
import { ErrorCodes, type LogEvent, type SessionEvent, type SessionObjectResult } from "../src/protocol.generated";
import { renderTranscript } from "../src/render";
import { MAX_LINE_BYTES, REQUEST_TOO_LONG } from "../src/rpc";
import { Transcript } from "../src/transcript";
import { TRANSCRIPT_SCRIPT } from "../src/webview";
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

  test("a prompt with images is read, then its new session created for images: a model that reads none, or a file that cannot be read, leaves no session", async () => {
    const png = file(files, "nosession.png", pngImage(6, 6));
    const count = async () => (await client.listSessions(ws)).sessions.length;
    const before = await count();
    const asked: Array<{ images: boolean }> = [];
    // What `dsh: Prompt` does for a new session, on the default (DeepSeek) profile: no images.
    const deepseek = async (o: { images: boolean }) => {
      asked.push(o);
      return (await client.createSession(ws, undefined, undefined, o)).sessionId;
    };
    await assert.rejects(promptSession(deepseek, [png]), (e: unknown) => {
      assert.ok(e instanceof RpcError && e.code === ErrorCodes.imagesUnsupported, String(e));
      assert.ok(e.message.includes("does not read images"), e.message);
      return true;
    });
    assert.deepEqual(asked, [{ images: true }]);
    assert.equal(await count(), before, "no session was created for a prompt the model cannot read");
    // A file that cannot be read: refused before any session is asked for.
    await assert.rejects(promptSession(deepseek, [png, path.join(files, "gone.png")]), /cannot read the image .*gone\.png \(ENOENT\)/);
    assert.equal(asked.length, 1, "the session is not asked for");
    assert.equal(await count(), before);
    // A text-only prompt creates its session as before (not for images); a model that reads
    // images takes a prompt with them.
    const text = await promptSession(deepseek, []);
    assert.deepEqual(asked.at(-1), { images: false });
    assert.equal(text.attachments, undefined);
    const vision = await promptSession(async (o) => (await client.createSession(ws, undefined, { profile: "vision" }, o)).sessionId, [png]);
    assert.deepEqual(vision.attachments, [{ name: "nosession.png", data: readFileSync(png).toString("base64") }]);
    assert.equal(await count(), before + 2);
    // An existing session is used as it is, the files still read first.
    await assert.rejects(promptSession(vision.sessionId, [path.join(files, "gone.png")]), /ENOENT/);
    assert.equal((await promptSession(vision.sessionId, [png])).sessionId, vision.sessionId);
    const r = await client.prompt(vision.sessionId, "What is this?", undefined, vision.attachments);
    assert.equal(r.stopReason, "completed", JSON.stringify(r));
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

/** A hash of `n` (64 hex digits). */
function hashOf(n: number): string {
  return createHash("sha256").update(String(n)).digest("hex");
}

/** A cache over a stand-in daemon serving every hash `size` base64 characters, counting fetches. */
function countingCache(limits: { maxImages: number; maxBytes: number }, size = 10): { cache: ImageCache; fetches: string[] } {
  const fetches: string[] = [];
  const cache = new ImageCache(
    async (_s, sha) => {
      fetches.push(sha);
      return { mediaType: "image/png", size, data: "A".repeat(size) };
    },
    undefined,
    limits,
  );
  return { cache, fetches };
}

test("the image cache keeps at most its count and bytes, the least recently used going first; a dropped image is fetched again", async () => {
  const { cache, fetches } = countingCache({ maxImages: 3, maxBytes: 1000 });
  const [a, b, c, d] = [1, 2, 3, 4].map(hashOf);
  for (const h of [a, b, c]) {
    await cache.load("s", h);
  }
  assert.deepEqual(cache.held, { images: 3, bytes: 30 });
  // `a` used again: `b` is now the least recently used, and goes when `d` comes.
  assert.equal(cache.state("s", a).kind, "loaded");
  await cache.load("s", d);
  assert.deepEqual(cache.held, { images: 3, bytes: 30 });
  assert.equal(fetches.length, 4);
  assert.equal(cache.state("s", a).kind, "loaded");
  assert.equal(cache.state("s", c).kind, "loaded");
  assert.equal(cache.state("s", d).kind, "loaded");
  assert.equal(fetches.length, 4, "kept images are not fetched again");
  // The dropped one: loading, fetched again, then here.
  const settled = new Promise<string>((resolve) => cache.onDidSettle((_s, sha) => resolve(sha)));
  assert.equal(cache.state("s", b).kind, "loading");
  assert.equal(await settled, b);
  assert.deepEqual(fetches.slice(4), [b]);
  assert.equal(cache.state("s", b).kind, "loaded");
  assert.equal(cache.held.images, 3);

  // Bytes: images of 400 characters under a limit of 1000 keep two.
  const big = countingCache({ maxImages: 64, maxBytes: 1000 }, 400);
  for (let i = 0; i < 5; i++) {
    await big.cache.load("s", hashOf(i));
  }
  assert.deepEqual(big.cache.held, { images: 2, bytes: 800 });
  assert.equal(big.cache.state("s", hashOf(4)).kind, "loaded");
  assert.equal(big.cache.state("s", hashOf(0)).kind, "loading");
  // One image over the limit alone is still kept (the newest stays).
  const huge = countingCache({ maxImages: 64, maxBytes: 100 }, 400);
  await huge.cache.load("s", a);
  await huge.cache.load("s", b);
  assert.deepEqual(huge.cache.held, { images: 1, bytes: 400 });
  assert.equal(huge.cache.state("s", b).kind, "loaded");
});

test("a page holds only the images its last full render shows: those it holds need not be in the cache, a dropped one is posted again", async () => {
  const { cache, fetches } = countingCache({ maxImages: 2, maxBytes: 1000 });
  const [a, b, c, d] = [1, 2, 3, 4].map(hashOf);
  const ref = (sha256: string) => ({ sha256, size: 10, mediaType: "image/png" });
  const page = new PageImages(cache, "s");
  await cache.load("s", a);
  await cache.load("s", b);
  let frame = page.frame();
  assert.equal(frame.lookup(ref(a)).kind, "loaded");
  assert.equal(frame.lookup(ref(b)).kind, "loaded");
  assert.equal(frame.lookup(ref(c)).kind, "loading");
  assert.deepEqual([...frame.batch.keys()], [a, b]);
  assert.equal(frame.batch.get(a), `data:image/png;base64,${"A".repeat(10)}`);
  page.posted(frame, true);
  assert.deepEqual([...page.holds], [a, b]);
  await cache.load("s", c);
  await cache.load("s", d);
  // The cache let a and b go; the page still holds them: shown, nothing fetched or posted again.
  assert.equal(cache.state("s", a).kind, "loading");
  const fetched = fetches.length;
  frame = page.frame();
  assert.equal(frame.lookup(ref(a)).kind, "loaded");
  assert.equal(frame.lookup(ref(c)).kind, "loaded");
  assert.deepEqual([...frame.batch.keys()], [c]);
  page.posted(frame, true);
  assert.deepEqual([...page.holds].sort(), [a, c].sort(), "b is no longer shown: the page dropped it");
  // A step's render adds what it posts.
  frame = page.frame();
  frame.lookup(ref(d));
  page.posted(frame, false);
  assert.deepEqual([...page.holds].sort(), [a, c, d].sort());
  // b shown again: asked of the cache (fetched again, it had gone), then posted again.
  frame = page.frame();
  assert.equal(frame.lookup(ref(b)).kind, "loading");
  await cache.load("s", b);
  assert.ok(fetches.slice(fetched).includes(b), "b was fetched again");
  frame = page.frame();
  assert.equal(frame.lookup(ref(b)).kind, "loaded");
  assert.deepEqual([...frame.batch.keys()], [b]);
  page.reset();
  assert.equal(page.holds.size, 0);
});

test("the page's script drops the images a full render does not show, and fills one posted again", () => {
  class Img {
    readonly attrs = new Map<string, string>();
    constructor(readonly dataset: { sha256: string }) {}
    getAttribute(n: string): string | null {
      return this.attrs.get(n) ?? null;
    }
    setAttribute(n: string, v: string): void {
      this.attrs.set(n, v);
    }
  }
  let imgs: Img[] = [];
  const main = {
    set innerHTML(html: string) {
      imgs = [...html.matchAll(/<img data-sha256="([0-9a-f]+)"/g)].map((m) => new Img({ sha256: m[1]! }));
    },
  };
  let onMessage: ((ev: { data: unknown }) => void) | undefined;
  const context = {
    acquireVsCodeApi: () => ({ setState() {}, postMessage() {} }),
    document: {
      body: { dataset: { session: "s" }, scrollHeight: 0 },
      getElementById: (id: string) => (id === "main" ? main : null),
      querySelectorAll: (sel: string) => (sel === "img[data-sha256]" ? imgs : []),
      addEventListener() {},
    },
    window: {
      innerHeight: 0,
      scrollY: 0,
      scrollTo() {},
      addEventListener: (type: string, f: (ev: { data: unknown }) => void) => {
        if (type === "message") {
          onMessage = f;
        }
      },
    },
  };
  vm.runInNewContext(TRANSCRIPT_SCRIPT, context);
  assert.ok(onMessage);
  const post = (data: unknown) => onMessage!({ data });
  const [a, b] = [hashOf(1), hashOf(2)];
  const html = (...shas: string[]) => shas.map((s) => `<img data-sha256="${s}" alt="x">`).join("");
  const src = (sha: string) => imgs.find((i) => i.dataset.sha256 === sha)?.getAttribute("src");
  post({ type: "images", images: { [a]: "data:image/png;base64,QQ==", [b]: "data:image/png;base64,Qg==" } });
  post({ type: "render", html: html(a, b) });
  assert.equal(src(a), "data:image/png;base64,QQ==");
  assert.equal(src(b), "data:image/png;base64,Qg==");
  // A render without b: the page lets it go; shown again, it waits for the extension to post it.
  post({ type: "render", html: html(a) });
  post({ type: "render", html: html(a, b) });
  assert.equal(src(a), "data:image/png;base64,QQ==");
  assert.equal(src(b), null, "b was dropped");
  post({ type: "images", images: { [b]: "data:image/png;base64,Qg==" } });
  assert.equal(src(b), "data:image/png;base64,Qg==");
});

test("opening an image refuses anything but a hash before using it, and writes the image 0600", async () => {
  const png = pngImage(4, 4);
  const fetches: string[] = [];
  const cache = new ImageCache(async (_s, sha) => {
    fetches.push(sha);
    return { mediaType: "image/png", size: png.length, data: png.toString("base64") };
  });
  const dir = tempDir("openimg");
  let dirs = 0;
  const inDir = () => {
    dirs++;
    return dir;
  };
  try {
    const bad: unknown[] = ["../../../etc/passwd", "A".repeat(64), "a".repeat(63), "a".repeat(65), `${"a".repeat(64)}\n`, `${"a".repeat(60)}/../`, "", 42, undefined, null, { toString: () => "a".repeat(64) }];
    for (const sha256 of bad) {
      await assert.rejects(writeImageFile(cache, { sessionId: "s", sha256 }, inDir), /^Error: not an image hash: .* \(an image is named by 64 lowercase hex digits, its SHA-256\)$/, String(sha256));
      assert.throws(() => checkImageHash(sha256), /not an image hash/);
    }
    await assert.rejects(writeImageFile(cache, "a".repeat(64), inDir), /not an image hash: undefined/);
    await assert.rejects(writeImageFile(cache, { sha256: "a".repeat(64) }, inDir), /no session names the image/);
    assert.throws(() => imageFileName({ sha256: "../x".padEnd(64, "a"), mediaType: "image/png" }), /not an image hash/);
    assert.deepEqual(fetches, [], "nothing was fetched");
    assert.equal(dirs, 0, "no file path was made");
    assert.deepEqual(readdirSync(dir), []);

    const sha = sha256(png);
    const opened = await writeImageFile(cache, { sessionId: "s", sha256: sha }, inDir, () => "shot.png");
    assert.equal(opened, path.join(dir, `shot-${sha.slice(0, 12)}.png`));
    assert.ok(readFileSync(opened).equals(png));
    assert.equal(statSync(opened).mode & 0o777, 0o600);
    assert.equal(await writeImageFile(cache, { sessionId: "s", sha256: sha }, inDir, () => "shot.png"), opened, "opened again: the same file");
    assert.deepEqual(fetches, [sha]);
  } finally {
    cleanup(dir);
  }
});
