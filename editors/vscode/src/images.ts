// Images of a transcript (a prompt's attachments, a tool result's) and of a prompt being written:
// the log names each by hash (`ImageRef`, docs/log.md "Images"); their bytes come once from the
// daemon (`session/object`) and are kept per hash. Reading files to attach, and the words the
// views show. No `vscode`.

import { writeFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import * as path from "node:path";
import type { Attachment, ImageRef, SessionObjectResult } from "./protocol.generated";

/** The file types the attach picker offers (the daemon reads the bytes, never the name). */
export const IMAGE_EXTENSIONS = ["png", "jpg", "jpeg", "gif", "webp"];

/** What the view knows of an image: asked for, here (base64), or not to be had (the daemon's words). */
export type ImageState =
  | { kind: "loading" }
  | { kind: "loaded"; mediaType: string; size: number; data: string }
  | { kind: "missing"; error: string };

/** What the renderer needs of an image: whether it is here (its bytes go to the page apart). */
export type ImageView = { kind: "loading" } | { kind: "loaded" } | { kind: "missing"; error: string };

/** The image's state for a session's transcript (the renderer asks; the cache fetches). */
export type ImageLookup = (ref: ImageRef) => ImageView;

/** A hash as the log names an image: 64 lowercase hex digits (SHA-256). */
const IMAGE_HASH = /^[0-9a-f]{64}$/;

/** `sha256` when it is an image's hash; anything else (it comes from a webview message or a
 * command's argument and goes into a file name) is refused with a clear error. */
export function checkImageHash(sha256: unknown): string {
  if (typeof sha256 !== "string" || !IMAGE_HASH.test(sha256)) {
    const shown = typeof sha256 === "string" ? JSON.stringify(sha256.length > 80 ? `${sha256.slice(0, 80)}…` : sha256) : typeof sha256;
    throw new Error(`not an image hash: ${shown} (an image is named by 64 lowercase hex digits, its SHA-256)`);
  }
  return sha256;
}

/** How much of the loaded images the cache keeps: at most `maxImages`, and at most `maxBytes`
 * of base64 (the least recently used go first; an image asked for again is fetched again). */
export type ImageCacheLimits = { maxImages: number; maxBytes: number };

export const IMAGE_CACHE_LIMITS: ImageCacheLimits = { maxImages: 64, maxBytes: 100_000_000 };

/** How many failures the cache remembers (the oldest are forgotten, then asked again). */
const MAX_FAILURES = 1024;

/** Fetches the image of a hash and keeps it, the most recently used first, within its limits.
 * An image is the same bytes in every session (the hash names them), so a loaded one serves all;
 * a failure is kept per session (another session's log may name it). */
export class ImageCache {
  /** Loaded images by hash, least recently used first (a `Map` keeps insertion order). */
  private readonly loaded = new Map<string, Extract<ImageState, { kind: "loaded" }>>();
  private loadedBytes = 0;
  private readonly failed = new Map<string, Extract<ImageState, { kind: "missing" }>>();
  private readonly inFlight = new Map<string, Promise<ImageState>>();
  private readonly listeners = new Set<(sessionId: string, sha256: string) => void>();

  constructor(
    private readonly fetch: (sessionId: string, sha256: string) => Promise<SessionObjectResult>,
    private readonly describe: (e: unknown) => string = (e) => (e instanceof Error ? e.message : String(e)),
    private readonly limits: ImageCacheLimits = IMAGE_CACHE_LIMITS,
  ) {}

  /** How many images are kept, and their base64's length. */
  get held(): { images: number; bytes: number } {
    return { images: this.loaded.size, bytes: this.loadedBytes };
  }

  /** A kept image or failure, the image marked as the most recently used. */
  private ready(sessionId: string, sha256: string): ImageState | undefined {
    const image = this.loaded.get(sha256);
    if (image) {
      this.loaded.delete(sha256);
      this.loaded.set(sha256, image);
      return image;
    }
    return this.failed.get(`${sessionId}/${sha256}`);
  }

  /** Keeps a loaded image, then lets the least recently used go until within the limits (the
   * newest stays even when it alone is over them). */
  private keep(sha256: string, image: Extract<ImageState, { kind: "loaded" }>): void {
    const old = this.loaded.get(sha256);
    if (old) {
      this.loaded.delete(sha256);
      this.loadedBytes -= old.data.length;
    }
    this.loaded.set(sha256, image);
    this.loadedBytes += image.data.length;
    for (const [oldest, state] of this.loaded) {
      if (this.loaded.size <= 1 || (this.loaded.size <= this.limits.maxImages && this.loadedBytes <= this.limits.maxBytes)) {
        break;
      }
      this.loaded.delete(oldest);
      this.loadedBytes -= state.data.length;
    }
  }

  /** Calls `listener` when an image asked for by a session is loaded or found missing. */
  onDidSettle(listener: (sessionId: string, sha256: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The image's state now; the first ask starts its fetch. */
  state(sessionId: string, sha256: string): ImageState {
    const ready = this.ready(sessionId, sha256);
    if (ready) {
      return ready;
    }
    void this.load(sessionId, sha256);
    return { kind: "loading" };
  }

  /** The image, fetched if it is not here yet. */
  load(sessionId: string, sha256: string): Promise<ImageState> {
    const ready = this.ready(sessionId, sha256);
    if (ready) {
      return Promise.resolve(ready);
    }
    const key = `${sessionId}/${sha256}`;
    let pending = this.inFlight.get(key);
    if (!pending) {
      pending = this.fetch(sessionId, sha256).then(
        (o): ImageState => {
          const state = { kind: "loaded" as const, mediaType: o.mediaType, size: o.size, data: o.data };
          this.keep(sha256, state);
          return state;
        },
        (e: unknown): ImageState => {
          const state = { kind: "missing" as const, error: this.describe(e) };
          this.failed.set(key, state);
          for (const oldest of this.failed.keys()) {
            if (this.failed.size <= MAX_FAILURES) {
              break;
            }
            this.failed.delete(oldest);
          }
          return state;
        },
      );
      pending = pending.finally(() => {
        this.inFlight.delete(key);
        for (const l of this.listeners) {
          l(sessionId, sha256);
        }
      });
      this.inFlight.set(key, pending);
    }
    return pending;
  }

  /** Forgets the failures (a reconnected daemon may serve them now). */
  forgetFailures(): void {
    this.failed.clear();
  }
}

/** One render's images: its lookup, the `data:` URLs to post before its HTML (hash → URL: the
 * loaded ones the page lacks), and the hashes it shows loaded. */
export type ImageFrame = { lookup: ImageLookup; batch: Map<string, string>; shown: Set<string> };

/** The images a transcript page holds: the page keeps only those its current render shows (a
 * full render drops the others, webview.ts), and this is the extension's copy of that list, so a
 * render posts only what the page lacks. An image the page holds is shown without asking the
 * cache (which may have let its bytes go); one it dropped is posted again when shown again. */
export class PageImages {
  private held = new Set<string>();

  constructor(
    private readonly cache: ImageCache,
    private readonly sessionId: string,
  ) {}

  /** The hashes the page holds now. */
  get holds(): ReadonlySet<string> {
    return this.held;
  }

  /** A render's lookup and what it needs posted. */
  frame(): ImageFrame {
    const batch = new Map<string, string>();
    const shown = new Set<string>();
    const lookup: ImageLookup = (ref) => {
      let view: ImageView;
      if (this.held.has(ref.sha256)) {
        view = { kind: "loaded" };
      } else {
        const state = this.cache.state(this.sessionId, ref.sha256);
        if (state.kind === "loaded") {
          batch.set(ref.sha256, dataUrl(state));
        }
        view = state;
      }
      if (view.kind === "loaded") {
        shown.add(ref.sha256);
      }
      return view;
    };
    return { lookup, batch, shown };
  }

  /** A frame was posted: a full render leaves the page holding what it shows, nothing else; a
   * step's adds what it showed. */
  posted(frame: ImageFrame, full: boolean): void {
    if (full) {
      this.held = new Set(frame.shown);
    } else {
      for (const sha256 of frame.batch.keys()) {
        this.held.add(sha256);
      }
    }
  }

  /** A new page: it holds nothing. */
  reset(): void {
    this.held.clear();
  }
}

/** Writes the image of a session's log to a file of `dir()` (0600; the directory is made when
 * first needed) for the editor to open full size, and returns the file. The argument comes from
 * a webview message or a command: its hash is checked before anything is done with it. */
export async function writeImageFile(cache: ImageCache, arg: unknown, dir: () => string, name?: (sessionId: string, sha256: string) => string | undefined): Promise<string> {
  const given = typeof arg === "object" && arg ? (arg as { sessionId?: unknown; sha256?: unknown }) : {};
  const sha256 = checkImageHash(given.sha256);
  if (typeof given.sessionId !== "string" || !given.sessionId) {
    throw new Error("no session names the image");
  }
  const sessionId = given.sessionId;
  const state = await cache.load(sessionId, sha256);
  if (state.kind !== "loaded") {
    throw new Error(state.kind === "missing" ? `the image ${sha256} is not available: ${state.error}` : `the image ${sha256} is still loading`);
  }
  const file = path.join(dir(), imageFileName({ sha256, mediaType: state.mediaType, name: name?.(sessionId, sha256) }));
  try {
    // Named by its hash: a file already there holds these bytes.
    writeFileSync(file, Buffer.from(state.data, "base64"), { mode: 0o600, flag: "wx" });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") {
      throw e;
    }
  }
  return file;
}

/** The image as a `data:` URL (what the webview shows: its CSP allows images from `data:` only). */
export function dataUrl(state: { mediaType: string; data: string }): string {
  return `data:${state.mediaType};base64,${state.data}`;
}

/** A size in bytes as people read it: `870 B`, `40.0 KB`, `2.9 MB` (powers of 1000, as the
 * daemon's limit of 3,000,000 bytes reads "3.0 MB"). */
export function formatBytes(n: number): string {
  if (n < 1000) {
    return `${n} B`;
  }
  if (n < 1_000_000) {
    return `${(n / 1000).toFixed(1)} KB`;
  }
  return `${(n / 1_000_000).toFixed(1)} MB`;
}

/** The line under an image: its name (when it has one), media type and size. */
export function imageCaption(ref: ImageRef): string {
  return [ref.name, ref.mediaType, formatBytes(ref.size)].filter(Boolean).join(" · ");
}

/** The file extension of a media type the log names. */
export function imageExtension(mediaType: string): string {
  switch (mediaType) {
    case "image/png":
      return ".png";
    case "image/jpeg":
      return ".jpg";
    case "image/gif":
      return ".gif";
    case "image/webp":
      return ".webp";
    default:
      return ".img";
  }
}

/** A file name to open an image under: its own name's safe characters (for the tab's title),
 * the hash's first twelve digits (two images of one name differ), the media type's extension. */
export function imageFileName(ref: Pick<ImageRef, "sha256" | "mediaType" | "name">): string {
  const stem = path
    .basename(ref.name ?? "", path.extname(ref.name ?? ""))
    .replace(/[^A-Za-z0-9._-]+/g, "_")
    .replace(/^[._]+/, "")
    .slice(0, 60);
  return `${stem ? `${stem}-` : ""}${checkImageHash(ref.sha256).slice(0, 12)}${imageExtension(ref.mediaType)}`;
}

/** Reads files to attach to a prompt: their bytes in base64, their base names for people. */
export async function readAttachments(files: string[]): Promise<Attachment[]> {
  return Promise.all(
    files.map(async (file) => {
      let bytes: Buffer;
      try {
        bytes = await readFile(file);
      } catch (e) {
        const why = (e as NodeJS.ErrnoException).code ?? (e instanceof Error ? e.message : String(e));
        throw new Error(`cannot read the image ${file} (${why})`);
      }
      return { name: path.basename(file), data: bytes.toString("base64") };
    }),
  );
}

/** The words the prompt box shows for what is attached: "2 images attached: a.png, b.png". */
export function attachedText(files: string[]): string {
  if (files.length === 0) {
    return "";
  }
  const names = files.map((f) => path.basename(f)).join(", ");
  return `${files.length} image${files.length === 1 ? "" : "s"} attached: ${names}`;
}

/** A prompt's session: one that exists, or one to create when the prompt is ready to send. */
export type PromptSession = string | ((o: { images: boolean }) => Promise<string>);

/** Reads the files to attach, then, for a new session, creates it saying whether the prompt has
 * images (`session/create {images}`: the daemon refuses a model that reads none,
 * `imagesUnsupported`, before it creates anything). A file that cannot be read, or a model that
 * reads no images, leaves no session behind. */
export async function promptSession(session: PromptSession, files: string[]): Promise<{ sessionId: string; attachments?: Attachment[] }> {
  const attachments = files.length ? await readAttachments(files) : undefined;
  const sessionId = typeof session === "string" ? session : await session({ images: attachments !== undefined });
  return { sessionId, ...(attachments ? { attachments } : {}) };
}
