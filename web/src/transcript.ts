// The live transcript: one item per log event worth showing, typed by the event's kind (the
// generated `LogEvent` union); a kind this page does not know yet is shown generically (its
// type and a compact summary), so new kinds appear without a change here. Streamed chunks
// fill one live item per step until the step's message arrives. Rows skip layout and paint
// while off screen (`content-visibility`), and only the pages of events asked for are held.

import type { ApprovalChoice, ImageRef, SessionEvent } from "../../editors/vscode/src/protocol.generated";
import { element } from "./dom";

export type TranscriptActions = {
  approve: (approvalId: string, decision: ApprovalChoice) => void;
  pickStep: (step: number) => void;
  /** The `src` of an image the session's log names (a `data:` URL), or why there is none. */
  image: (sha256: string) => Promise<string>;
};

/** A size in bytes, for people. */
export function bytes(size: number): string {
  if (size < 1024) {
    return `${size} bytes`;
  }
  return size < 1024 * 1024 ? `${(size / 1024).toFixed(1)} KiB` : `${(size / 1024 / 1024).toFixed(1)} MiB`;
}

function folded(summary: string, body: string, className = "fold"): HTMLElement {
  const details = element("details", className);
  details.append(element("summary", undefined, summary), element("pre", undefined, body));
  return details;
}

const SHOWN_CHARS = 20_000;

/** Rows kept in the DOM while following a live session. */
const MAX_ROWS = 1500;

function clip(text: string): string {
  return text.length > SHOWN_CHARS ? `${text.slice(0, SHOWN_CHARS)}\n… (${text.length - SHOWN_CHARS} more characters)` : text;
}

/** A one-line summary of any value: what an unknown kind shows. */
export function summarize(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? "";
  } catch {
    text = String(value);
  }
  return text.length > 160 ? `${text.slice(0, 160)}…` : text;
}

export class Transcript {
  readonly element: HTMLElement;
  private readonly list: HTMLElement;
  private readonly streams = new Map<number, HTMLElement>();
  private readonly approvals = new Map<string, HTMLElement>();
  private readonly steering = new Map<number, string>();
  private readonly notes = new Map<number, string>();
  private readonly toolNames = new Map<string, string>();
  /** The seq of the first event shown (pages before it can be loaded). */
  firstSeq = Number.POSITIVE_INFINITY;
  lastSeq = -1;
  private follow = true;

  constructor(private readonly actions: TranscriptActions) {
    this.element = element("section", "transcript");
    this.element.setAttribute("aria-label", "transcript");
    this.element.tabIndex = 0;
    this.list = element("ol", "events");
    this.element.append(this.list);
    this.element.addEventListener("scroll", () => {
      const bottom = this.element.scrollHeight - this.element.scrollTop - this.element.clientHeight;
      this.follow = bottom < 40;
    });
  }

  /** Puts an earlier page above what is shown (the scroll position kept). */
  prepend(events: SessionEvent[]): void {
    const height = this.element.scrollHeight;
    const fragment = document.createDocumentFragment();
    for (const event of events) {
      // An earlier step's streamed chunks: its message (or its error) says what they said.
      if (event.seq < this.firstSeq && event.type !== "assistant/chunk") {
        const item = this.render(event);
        if (item) {
          fragment.append(item);
        }
      }
    }
    if (events.length) {
      this.firstSeq = Math.min(this.firstSeq, events[0]?.seq ?? this.firstSeq);
    }
    this.list.prepend(fragment);
    this.element.dataset.firstSeq = String(this.firstSeq);
    this.element.scrollTop += this.element.scrollHeight - height;
  }

  /** Adds events at the end (a page or live ones); an event already shown is skipped. */
  append(events: SessionEvent[]): void {
    const fragment = document.createDocumentFragment();
    for (const event of events) {
      if (event.seq <= this.lastSeq) {
        continue;
      }
      this.lastSeq = event.seq;
      this.firstSeq = Math.min(this.firstSeq, event.seq);
      const item = this.render(event);
      if (item) {
        fragment.append(item);
      }
    }
    this.list.append(fragment);
    this.element.dataset.firstSeq = String(this.firstSeq);
    if (this.follow) {
      this.trim();
      this.element.scrollTop = this.element.scrollHeight;
    }
  }

  /** While following the end, the oldest rows beyond [`MAX_ROWS`] leave the DOM (a long live
   * turn does not grow the page without bound); "load earlier events" brings them back. */
  private trim(): void {
    const excess = this.list.children.length - MAX_ROWS;
    if (excess <= 0) {
      return;
    }
    for (let index = 0; index < excess; index++) {
      this.list.firstElementChild?.remove();
    }
    const first = this.list.querySelector<HTMLElement>("li[data-seq]");
    this.firstSeq = first ? Number(first.dataset.seq) : this.lastSeq + 1;
    this.element.dataset.firstSeq = String(this.firstSeq);
    this.onTrim?.();
  }

  /** Called when rows were trimmed from the top. */
  onTrim: (() => void) | undefined;

  private item(event: SessionEvent, className: string): HTMLLIElement {
    const item = element("li", `event ${className}`);
    item.dataset.seq = String(event.seq);
    item.dataset.type = event.type;
    return item;
  }

  /** The row of one event, or none (chunks go into their step's live row). */
  private render(event: SessionEvent): HTMLElement | undefined {
    switch (event.type) {
      case "session/meta": {
        const item = this.item(event, "note");
        const fork = event.data.forkedFrom ? ` · fork of ${event.data.forkedFrom.sessionId} at seq ${event.data.forkedFrom.seq}` : "";
        item.textContent = `session ${event.data.sessionId} in ${event.data.workspace}${fork}`;
        return item;
      }
      case "turn/start":
        return this.divider(event, `turn ${event.data.turn}`);
      case "turn/end": {
        const item = this.item(event, `turn-end reason-${event.data.reason}`);
        item.textContent = `turn ${event.data.turn} ended: ${event.data.reason}${event.data.error ? ` — ${event.data.error}` : ""}`;
        return item;
      }
      case "turn/limit": {
        const item = this.item(event, "note warn");
        item.textContent = `limit ${event.data.limit} reached: ${event.data.spent} of ${event.data.value}`;
        return item;
      }
      case "user/message": {
        const item = this.item(event, "user");
        const command = event.data.command ? ` · /${event.data.command.name} (${event.data.command.source})` : "";
        item.append(element("div", "who", `you${command}`), element("div", "text", clip(event.data.text)));
        this.images(item, event.data.images);
        return item;
      }
      case "steering/message": {
        this.steering.set(event.seq, event.data.text);
        const item = this.item(event, "steering");
        item.append(element("div", "who", "steering"), element("div", "text", clip(event.data.text)));
        item.append(element("div", "pending", "waiting for the next request"));
        return item;
      }
      case "context/message": {
        this.notes.set(event.seq, event.data.source ?? "context");
        const item = this.item(event, "context");
        item.append(folded(`note · ${event.data.source ?? "context"}`, clip(event.data.text)));
        return item;
      }
      case "step/start": {
        const item = this.item(event, "step");
        const button = element("button", "step-link", `step ${event.data.step}`);
        button.type = "button";
        button.addEventListener("click", () => this.actions.pickStep(event.data.step));
        item.append(button);
        for (const seq of event.joined ?? []) {
          const text = this.steering.get(seq);
          const note = this.notes.get(seq);
          const joined = element("span", "joined", text !== undefined ? `steering joined: ${text}` : `${note ?? "note"} note joined`);
          item.append(joined);
          const row = this.list.querySelector<HTMLElement>(`li[data-seq="${seq}"] .pending`);
          if (row) {
            row.textContent = `joined step ${event.data.step}`;
            row.className = "landed";
          }
        }
        return item;
      }
      case "request/header":
        return this.marker(event, "request header (system prompt, tools, config)");
      case "request/header-delta": {
        const parts = [event.data.system ? "system prompt" : "", event.data.tools ? "tools" : "", event.data.config ? "config" : ""].filter(Boolean);
        return this.marker(event, `header changed: ${parts.join(", ") || "nothing"}`);
      }
      case "request/sent":
        return undefined;
      case "assistant/chunk": {
        let live = this.streams.get(event.data.step);
        if (!live) {
          live = this.item(event, "assistant streaming");
          live.append(element("div", "who", "assistant"), element("div", "text", ""));
          this.streams.set(event.data.step, live);
          this.list.append(live);
        }
        const delta = event.data.delta;
        if (delta.kind === "text" || delta.kind === "reasoning") {
          const text = live.querySelector(".text");
          if (text) {
            text.textContent = clip((text.textContent ?? "") + delta.text);
          }
        }
        return undefined;
      }
      case "assistant/message": {
        this.streams.get(event.data.step)?.remove();
        this.streams.delete(event.data.step);
        const item = this.item(event, "assistant");
        item.append(element("div", "who", `assistant · step ${event.data.step}`));
        const message = event.data.message;
        if (message.reasoningContent) {
          item.append(folded("thinking", clip(message.reasoningContent), "fold thinking"));
        }
        if (message.content) {
          item.append(element("div", "text", clip(message.content)));
        }
        for (const call of message.toolCalls ?? []) {
          this.toolNames.set(call.id, call.name);
          item.append(folded(`→ ${call.name}`, clip(prettyJson(call.arguments)), "fold call"));
        }
        return item;
      }
      case "tool/call": {
        const item = this.item(event, "tool-call");
        item.textContent = `running ${event.data.name}${event.data.unconfined ? " (unconfined)" : ""}`;
        return item;
      }
      case "tool/progress":
        return undefined;
      case "tool/result": {
        const item = this.item(event, event.data.isError ? "tool-result error" : "tool-result");
        item.append(folded(`${event.data.isError ? "✗" : "✓"} ${event.data.name} result (${event.data.content.length} chars)`, clip(event.data.content)));
        this.images(item, event.data.images);
        return item;
      }
      case "plan/update": {
        const item = this.item(event, "plan");
        item.append(element("div", "who", "plan"));
        if (event.data.explanation) {
          item.append(element("div", "text", event.data.explanation));
        }
        const list = element("ul");
        for (const entry of event.data.plan) {
          list.append(element("li", `plan-${entry.status}`, `${entry.status === "completed" ? "☑" : entry.status === "in_progress" ? "▶" : "☐"} ${entry.step}`));
        }
        item.append(list);
        return item;
      }
      case "step/end": {
        const usage = event.data.usage;
        const item = this.item(event, "step-end");
        item.textContent = `step ${event.data.step} · ${event.data.finishReason} · prompt ${usage.promptTokens} (cached ${usage.cacheHitTokens}) · output ${usage.completionTokens}`;
        return item;
      }
      case "step/error": {
        this.streams.get(event.data.step)?.classList.add("interrupted");
        const item = this.item(event, event.data.cancelled ? "note" : "note error");
        item.textContent = `step ${event.data.step} ${event.data.cancelled ? "cancelled" : `failed: ${event.data.error}`}`;
        return item;
      }
      case "llm/retry": {
        const item = this.item(event, "note warn");
        item.textContent = `retry ${event.data.attempt} of step ${event.data.step} in ${event.data.delayMs} ms: ${event.data.error}`;
        return item;
      }
      case "mcp/wait": {
        const item = this.item(event, "note");
        item.textContent = `waiting for MCP servers ${event.data.servers.join(", ")} (${event.data.reason})`;
        return item;
      }
      case "approval/request":
        return this.approval(event.seq, event);
      case "approval/decision": {
        const card = this.approvals.get(event.data.approvalId);
        if (card) {
          card.classList.add("decided");
          for (const button of card.querySelectorAll("button")) {
            button.disabled = true;
          }
          const status = card.querySelector(".status");
          if (status) {
            status.textContent = `answered: ${event.data.decision}`;
          }
        }
        const item = this.item(event, "note");
        item.textContent = `approval ${event.data.decision}`;
        return item;
      }
      case "compact/start":
        return this.marker(event, `compaction started (${event.data.reason}, ${event.data.tokensBefore} tokens)`);
      case "compact/summary": {
        const item = this.item(event, "marker");
        item.append(folded(`compaction summary (${event.data.model})`, clip(event.data.summary)));
        return item;
      }
      case "surface/replace":
        return this.marker(event, `conversation rewritten (events ${event.data.start}–${event.data.end})`);
      case "workspace/checkpoint": {
        const item = this.item(event, "note");
        const changed = event.data.changed?.length ? `, ${event.data.changed.length} changed` : "";
        item.textContent = `checkpoint${event.data.step !== undefined ? ` of step ${event.data.step}` : ""}: ${event.data.files} files${changed}`;
        return item;
      }
      case "workspace/rewind": {
        const item = this.item(event, "marker");
        item.textContent = `rewound${event.data.toStep !== undefined ? ` to step ${event.data.toStep}` : ""} (files: ${event.data.files}, conversation: ${event.data.conversation})`;
        return item;
      }
      case "hook/run": {
        const run = event.data;
        const item = this.item(event, run.outcome === "ok" ? "note" : "note error");
        const tool = run.tool ? `, ${run.tool}` : "";
        const why = run.outcome === "ok" ? "" : `: ${(run.error ?? run.stderr ?? "").trim()}`;
        item.textContent = `hook ${run.hook} (${run.event}${tool}) ${run.outcome}${why} · ${run.durationMs} ms`;
        return item;
      }
      case "task/spawn": {
        const item = this.item(event, "note");
        const link = element("a", "child-link", `sub-agent ${event.data.sessionId}`);
        link.setAttribute("href", `#/s/${encodeURIComponent(event.data.sessionId)}`);
        item.append(link, document.createTextNode(` (${event.data.context}, depth ${event.data.depth}): ${event.data.description}`));
        return item;
      }
      default:
        return this.generic(event);
    }
  }

  /** The images an event names, after its text: each with its name, type and size, shown
   * once its bytes arrive, or a placeholder that says why they did not. */
  private images(item: HTMLElement, images: ImageRef[] | undefined): void {
    for (const image of images ?? []) {
      const figure = element("figure", "image");
      figure.dataset.sha256 = image.sha256;
      const slot = element("div", "image-slot loading", "loading the image…");
      const name = image.name ?? `${image.sha256.slice(0, 12)}…`;
      figure.append(slot, element("figcaption", undefined, `${name} · ${image.mediaType} · ${bytes(image.size)}`));
      this.actions.image(image.sha256).then(
        (src) => {
          const img = element("img");
          img.alt = image.name ?? "image";
          img.src = src;
          slot.className = "image-slot";
          slot.replaceChildren(img);
        },
        (error: unknown) => {
          slot.className = "image-slot missing";
          slot.textContent = `image not available: ${error instanceof Error ? error.message : String(error)}`;
        },
      );
      item.append(figure);
    }
  }

  /** An event of a kind this page does not know: its type and a compact summary. */
  private generic(event: { seq: number; type: string; data?: unknown }): HTMLElement {
    const item = element("li", "event generic");
    item.dataset.seq = String(event.seq);
    item.dataset.type = event.type;
    item.append(element("span", "kind", event.type), element("span", "summary", summarize(event.data)));
    return item;
  }

  private divider(event: SessionEvent, text: string): HTMLElement {
    const item = this.item(event, "divider");
    item.textContent = text;
    return item;
  }

  private marker(event: SessionEvent, text: string): HTMLElement {
    const item = this.item(event, "marker");
    item.textContent = text;
    return item;
  }

  private approval(seq: number, event: Extract<SessionEvent, { type: "approval/request" }>): HTMLElement {
    const item = this.item(event, "approval");
    item.dataset.seq = String(seq);
    item.append(element("div", "who", `approval · ${event.data.tool}`), element("pre", undefined, clip(event.data.summary)));
    const buttons = element("div", "buttons");
    const choices: [ApprovalChoice, string][] = [
      ["allow", "Allow"],
      ["deny", "Deny"],
      ["allowAlways", "Always allow"],
    ];
    for (const [choice, label] of choices) {
      const button = element("button", `approve-${choice}`, label);
      button.type = "button";
      button.addEventListener("click", () => this.actions.approve(event.data.approvalId, choice));
      buttons.append(button);
    }
    item.append(buttons, element("span", "status", "waiting for an answer"));
    this.approvals.set(event.data.approvalId, item);
    return item;
  }
}

function prettyJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}
