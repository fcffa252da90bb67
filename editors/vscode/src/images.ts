// Images of a transcript (a prompt's attachments, a tool result's) and of a prompt being written:
// the log names each by hash (`ImageRef`, docs/log.md "Images"); their bytes come once from the
// daemon (`session/object`) and are kept per hash. Reading files to attach, and the words the
// views show. No `vscode`.

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

/** The image's state for a session's transcript (the renderer asks; the cache fetches). */
export type ImageLookup = (ref: ImageRef) => ImageState;

/** Fetches the image of a hash once and keeps it. An image is the same bytes in every session
 * (the hash names them), so a loaded one serves all; a failure is kept per session (another
 * session's log may name it). */
export class ImageCache {
  private readonly loaded = new Map<string, Extract<ImageState, { kind: "loaded" }>>();
  private readonly failed = new Map<string, Extract<ImageState, { kind: "missing" }>>();
  private readonly inFlight = new Map<string, Promise<ImageState>>();
  private readonly listeners = new Set<(sessionId: string, sha256: string) => void>();

  constructor(
    private readonly fetch: (sessionId: string, sha256: string) => Promise<SessionObjectResult>,
    private readonly describe: (e: unknown) => string = (e) => (e instanceof Error ? e.message : String(e)),
  ) {}

  /** Calls `listener` when an image asked for by a session is loaded or found missing. */
  onDidSettle(listener: (sessionId: string, sha256: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The image's state now; the first ask starts its fetch. */
  state(sessionId: string, sha256: string): ImageState {
    const ready = this.loaded.get(sha256) ?? this.failed.get(`${sessionId}/${sha256}`);
    if (ready) {
      return ready;
    }
    void this.load(sessionId, sha256);
    return { kind: "loading" };
  }

  /** The image, fetched if it is not here yet. */
  load(sessionId: string, sha256: string): Promise<ImageState> {
    const ready = this.loaded.get(sha256) ?? this.failed.get(`${sessionId}/${sha256}`);
    if (ready) {
      return Promise.resolve(ready);
    }
    const key = `${sessionId}/${sha256}`;
    let pending = this.inFlight.get(key);
    if (!pending) {
      pending = this.fetch(sessionId, sha256).then(
        (o): ImageState => {
          const state = { kind: "loaded" as const, mediaType: o.mediaType, size: o.size, data: o.data };
          this.loaded.set(sha256, state);
          return state;
        },
        (e: unknown): ImageState => {
          const state = { kind: "missing" as const, error: this.describe(e) };
          this.failed.set(key, state);
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
  return `${stem ? `${stem}-` : ""}${ref.sha256.slice(0, 12)}${imageExtension(ref.mediaType)}`;
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
