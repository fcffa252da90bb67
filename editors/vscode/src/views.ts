// The views: the Sessions tree (session → turn → step, usage as each step's description), the
// transcript webview, the status bar item, and the read-only "what the model saw" documents.

import * as vscode from "vscode";
import type { Connection } from "./connection";
import { describeError } from "./daemon";
import { PageImages, type ImageCache, type ImageFrame } from "./images";
import type { SessionSummary } from "./protocol.generated";
import { renderStep, renderTranscript } from "./render";
import { renderSaw } from "./saw";
import type { SessionManager } from "./sessions";
import type { StepView, TurnView } from "./transcript";
import { dropExplanation, formatCost, formatCostSaved, formatPercent, formatTokens, formatUsage, hitClass, hitPercent, sessionDescription, statusText, usageMarkdown, type HitClass } from "./usage";
import { transcriptPage } from "./webview";

// ---- Sessions tree ---------------------------------------------------------------------------

export type TreeNode =
  | { kind: "session"; summary: SessionSummary }
  | { kind: "turn"; sessionId: string; turn: TurnView }
  | { kind: "step"; sessionId: string; step: StepView };

const HIT_COLORS: Record<HitClass, string> = {
  high: "charts.green",
  mid: "charts.yellow",
  low: "charts.red",
  cold: "charts.blue",
  none: "disabledForeground",
};

export class SessionsTree implements vscode.TreeDataProvider<TreeNode> {
  private readonly changed = new vscode.EventEmitter<TreeNode | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly sessions: SessionManager) {
    sessions.onDidChange((c) => {
      // Redraw at most every 200 ms: chunks stream far faster.
      if (c.structural || c.step === undefined) {
        this.schedule();
      }
    });
  }

  private schedule(): void {
    if (this.timer) {
      return;
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.changed.fire(undefined);
    }, 200);
  }

  getTreeItem(n: TreeNode): vscode.TreeItem {
    switch (n.kind) {
      case "session": {
        const s = n.summary;
        if (s.error) {
          // A log the daemon cannot read: listed, so it is not silently lost, but not openable.
          const broken = new vscode.TreeItem(s.sessionId, vscode.TreeItemCollapsibleState.None);
          broken.id = `session:${s.sessionId}`;
          broken.description = "unreadable";
          broken.tooltip = new vscode.MarkdownString(`**The log of \`${s.sessionId}\` cannot be read**\n\n${escapeMd(s.error)}`);
          broken.iconPath = new vscode.ThemeIcon("warning");
          broken.contextValue = "brokenSession";
          return broken;
        }
        const open = this.sessions.open.get(s.sessionId);
        const t = open?.transcript;
        const item = new vscode.TreeItem(s.title ?? t?.title ?? s.sessionId, vscode.TreeItemCollapsibleState.Collapsed);
        item.id = `session:${s.sessionId}`;
        const running = t ? t.running : s.running;
        const totals = t?.totals;
        item.description = sessionDescription(s, t ? { steps: t.steps.size, totals: t.totals, running: t.running, cost: t.sessionCost } : undefined);
        const cost = t?.sessionCost ?? s.cost;
        item.tooltip = new vscode.MarkdownString(
          `**${escapeMd(s.title ?? "(no prompt yet)")}**\n\n` +
            `id \`${s.sessionId}\`  \nworkspace \`${s.workspace}\`  \n` +
            (s.forkedFrom ? `forked from \`${s.forkedFrom.sessionId}\` before seq ${s.forkedFrom.seq}  \n` : "") +
            (s.profile || s.model ? `profile \`${s.profile ?? "deepseek"}\` · model \`${s.model ?? "?"}\`  \n` : "") +
            `${s.turns} turns · ${s.steps} steps · updated ${new Date(s.updatedMs).toLocaleString()}` +
            (totals && totals.promptTokens ? `\n\nΣ ${formatUsage(totals)}` : "") +
            (cost ? `\n\n${formatCostSaved(cost)}` : s.lastUsage ? "\n\ncost unknown: no price configured for a model of this session" : ""),
        );
        item.iconPath = new vscode.ThemeIcon(running ? "sync~spin" : s.forkedFrom ? "repo-forked" : "comment-discussion");
        item.contextValue = "session";
        item.command = { command: "dsh.openSession", title: "Open", arguments: [s.sessionId] };
        return item;
      }
      case "turn": {
        const t = n.turn;
        const item = new vscode.TreeItem(`Turn ${t.turn}`, vscode.TreeItemCollapsibleState.Expanded);
        item.id = `turn:${n.sessionId}:${t.turn}`;
        item.description = (t.prompt ?? "").replace(/\s+/g, " ").slice(0, 80) + (t.end && t.end.reason !== "completed" ? ` · ${t.end.reason}` : "");
        item.tooltip = t.prompt;
        item.iconPath = new vscode.ThemeIcon(t.end ? (t.end.reason === "completed" ? "pass" : t.end.reason === "cancelled" ? "circle-slash" : "error") : "loading~spin");
        item.contextValue = "turn";
        return item;
      }
      case "step": {
        const s = n.step;
        const usage = s.row?.usage ?? s.usage;
        // A step whose `task` calls started sub-agents holds their sessions.
        const item = new vscode.TreeItem(`Step ${s.step}`, s.children.length ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.None);
        item.id = `step:${n.sessionId}:${s.step}`;
        const cost = s.row?.usage ? s.row.cost : undefined;
        item.description = usage ? formatUsage(usage, s.row?.hitPercent ?? hitPercent(usage), cost) : s.state === "running" ? "running…" : s.state;
        const why = dropExplanation(s.row);
        item.tooltip = new vscode.MarkdownString(
          `**Step ${s.step}** (turn ${s.turn}, seq ${s.seq})\n\n` +
            (usage
              ? `| prompt | cached | new | out | hit | cost |\n|---:|---:|---:|---:|---:|---:|\n| ${formatTokens(usage.promptTokens)} | ${formatTokens(usage.cacheHitTokens)} | ${formatTokens(usage.cacheMissTokens)} | ${formatTokens(usage.completionTokens)} | ${formatPercent(s.row?.hitPercent ?? hitPercent(usage))} | ${formatCost(cost) ?? "–"} |\n\n`
              : "") +
            (cost ? `${formatCostSaved(cost)}${s.row?.model ? ` at the prices of ${escapeMd(`${s.row.profile ?? "deepseek"}/${s.row.model}`)}` : ""}\n\n` : "") +
            (why ? `${s.row?.dropped ? "⚠ " : ""}${escapeMd(why)}\n\n` : "") +
            (s.error ? `${s.state}: ${escapeMd(s.error)}` : ""),
        );
        const cls = hitClass(usage, s.row);
        item.iconPath =
          s.state === "running"
            ? new vscode.ThemeIcon("loading~spin")
            : s.state === "cancelled" || s.state === "error"
              ? new vscode.ThemeIcon("error", new vscode.ThemeColor("charts.red"))
              : new vscode.ThemeIcon(s.row?.dropped ? "warning" : "circle-filled", new vscode.ThemeColor(HIT_COLORS[cls]));
        item.contextValue = "step";
        item.command = { command: "dsh.revealStep", title: "Show in Transcript", arguments: [n.sessionId, s.step] };
        return item;
      }
    }
  }

  getParent(n: TreeNode): TreeNode | undefined {
    if (n.kind === "session" && n.summary.parent) {
      // A sub-agent's session sits under the step of its parent that started it.
      const link = n.summary.parent;
      const parent = this.sessions.open.get(link.sessionId)?.transcript;
      for (const step of parent?.steps.values() ?? []) {
        if (step.children.some((c) => c.callId === link.toolCallId)) {
          return { kind: "step", sessionId: link.sessionId, step };
        }
      }
      return undefined;
    }
    if (n.kind === "turn") {
      const summary = this.sessions.summaries.find((s) => s.sessionId === n.sessionId);
      return summary ? { kind: "session", summary } : undefined;
    }
    if (n.kind === "step") {
      const turn = this.sessions.open.get(n.sessionId)?.transcript.turns.find((t) => t.turn === n.step.turn);
      return turn ? { kind: "turn", sessionId: n.sessionId, turn } : undefined;
    }
    return undefined;
  }

  async getChildren(n?: TreeNode): Promise<TreeNode[]> {
    if (!n) {
      try {
        const list = await this.sessions.refreshListQuiet();
        // Newest first; a sub-agent's session is under its parent's step, when its parent is listed.
        const listed = new Set(list.map((s) => s.sessionId));
        return [...list]
          .filter((s) => !s.parent || !listed.has(s.parent.sessionId))
          .sort((a, b) => b.updatedMs - a.updatedMs)
          .map((summary) => ({ kind: "session", summary }));
      } catch {
        return [];
      }
    }
    if (n.kind === "session") {
      const s = await this.sessions.openSession(n.summary.sessionId);
      return s.transcript.turns.map((turn) => ({ kind: "turn", sessionId: s.id, turn }));
    }
    if (n.kind === "turn") {
      return n.turn.steps.map((step) => ({ kind: "step", sessionId: n.sessionId, step }));
    }
    if (n.kind === "step" && n.step.children.length) {
      // The listing may predate the child: list again when it does not know one.
      const known = (id: string) => this.sessions.summaries.find((s) => s.sessionId === id);
      if (n.step.children.some((c) => !known(c.sessionId))) {
        await this.sessions.refreshListQuiet().catch(() => undefined);
      }
      return n.step.children.flatMap((c) => {
        const summary = known(c.sessionId);
        return summary ? [{ kind: "session" as const, summary }] : [];
      });
    }
    return [];
  }
}

// ---- Transcript webview ------------------------------------------------------------------------

/** What the transcript page posts: a button's action and what it names. */
export type PanelAction = { action: string; step?: number; approval?: string; session?: string; sha256?: string };

export class TranscriptPanels implements vscode.Disposable {
  readonly panels = new Map<string, vscode.WebviewPanel>();
  /** The last HTML posted per session (what the user sees; the end-to-end test reads it). */
  readonly lastHtml = new Map<string, string>();
  private readonly pending = new Map<string, NodeJS.Timeout>();
  private readonly dirty = new Map<string, Set<"full" | number>>();
  private readonly ready = new Set<string>();
  /** The images each panel's page holds (what its last full render shows and what steps added
   * since; a new page starts empty). */
  private readonly pageImages = new Map<string, PageImages>();
  private readonly stopImages: () => void;

  constructor(
    private readonly sessions: SessionManager,
    private readonly images: ImageCache,
    private readonly onAction: (sessionId: string, m: PanelAction) => void,
  ) {
    // An image arrived (or was found missing): its transcript shows it.
    this.stopImages = images.onDidSettle((sessionId) => this.schedule(sessionId, "full"));
    sessions.onDidChange((c) => {
      if (c.sessionId) {
        this.schedule(c.sessionId, c.structural || c.step === undefined ? "full" : c.step);
      } else {
        for (const id of this.panels.keys()) {
          this.schedule(id, "full");
        }
      }
    });
  }

  async show(sessionId: string, column = vscode.ViewColumn.Active): Promise<vscode.WebviewPanel> {
    await this.sessions.openSession(sessionId);
    this.sessions.active = sessionId;
    this.sessions.fireActive();
    let panel = this.panels.get(sessionId);
    if (panel) {
      panel.reveal(column);
      return panel;
    }
    panel = vscode.window.createWebviewPanel("dsh.transcript", this.title(sessionId), column, {
      enableScripts: true,
      retainContextWhenHidden: true,
      enableFindWidget: true,
    });
    this.adopt(panel, sessionId);
    return panel;
  }

  /** Reopens a transcript VS Code restored after a reload (`WebviewPanelSerializer`). */
  async restore(panel: vscode.WebviewPanel, state: unknown): Promise<void> {
    const sessionId = (state as { sessionId?: string } | undefined)?.sessionId;
    if (!sessionId || this.panels.has(sessionId)) {
      panel.dispose();
      return;
    }
    try {
      await this.sessions.openSession(sessionId);
    } catch {
      panel.dispose();
      return;
    }
    this.adopt(panel, sessionId);
  }

  private adopt(panel: vscode.WebviewPanel, sessionId: string): void {
    const s = this.sessions.open.get(sessionId)!;
    panel.webview.options = { enableScripts: true };
    panel.title = this.title(sessionId);
    const nonce = Math.random().toString(36).slice(2) + Date.now().toString(36);
    // The first HTML's images are posted once the page says it is ready.
    const page = new PageImages(this.images, sessionId);
    this.pageImages.set(sessionId, page);
    const html = renderTranscript(s.transcript, page.frame().lookup);
    this.lastHtml.set(sessionId, html);
    panel.webview.html = transcriptPage({ nonce, cspSource: panel.webview.cspSource, title: this.title(sessionId), initial: html, sessionId });
    panel.webview.onDidReceiveMessage((m: PanelAction) => {
      if (m.action === "ready") {
        // A new page (first load, or the webview reloaded): it holds no image yet.
        page.reset();
        this.ready.add(sessionId);
        this.render(sessionId);
        return;
      }
      this.onAction(sessionId, m);
    });
    panel.onDidChangeViewState((e) => {
      if (e.webviewPanel.active) {
        this.sessions.active = sessionId;
        this.sessions.fireActive();
      }
    });
    panel.onDidDispose(() => {
      this.panels.delete(sessionId);
      this.ready.delete(sessionId);
      this.pageImages.delete(sessionId);
    });
    this.panels.set(sessionId, panel);
  }

  reveal(sessionId: string, step: number): void {
    void this.show(sessionId).then((p) => p.webview.postMessage({ type: "reveal", step }));
  }

  private title(sessionId: string): string {
    const t = this.sessions.open.get(sessionId)?.transcript;
    const title = t?.title ?? this.sessions.summaries.find((s) => s.sessionId === sessionId)?.title ?? sessionId;
    return `dsh: ${title.length > 40 ? title.slice(0, 39) + "…" : title}`;
  }

  /** Coalesces redraws: a full render, or only the steps that changed (streaming). */
  private schedule(sessionId: string, what: "full" | number): void {
    if (!this.panels.has(sessionId)) {
      return;
    }
    let dirty = this.dirty.get(sessionId);
    if (!dirty) {
      dirty = new Set();
      this.dirty.set(sessionId, dirty);
    }
    dirty.add(what);
    if (this.pending.has(sessionId)) {
      return;
    }
    this.pending.set(
      sessionId,
      setTimeout(() => {
        this.pending.delete(sessionId);
        const d = this.dirty.get(sessionId) ?? new Set(["full" as const]);
        this.dirty.delete(sessionId);
        if (d.has("full")) {
          this.render(sessionId);
        } else {
          this.renderSteps(sessionId, [...d] as number[]);
        }
      }, 40),
    );
  }

  /** Posts the images a page lacks (before the HTML that shows them). */
  private postImages(panel: vscode.WebviewPanel, frame: ImageFrame): void {
    if (frame.batch.size > 0) {
      void panel.webview.postMessage({ type: "images", images: Object.fromEntries(frame.batch) });
    }
  }

  private render(sessionId: string): void {
    const panel = this.panels.get(sessionId);
    const s = this.sessions.open.get(sessionId);
    const page = this.pageImages.get(sessionId);
    if (!panel || !s || !page) {
      return;
    }
    const frame = page.frame();
    const html = renderTranscript(s.transcript, frame.lookup);
    this.lastHtml.set(sessionId, html);
    panel.title = this.title(sessionId);
    if (this.ready.has(sessionId)) {
      // The page keeps the images this render shows and drops the others (webview.ts).
      this.postImages(panel, frame);
      void panel.webview.postMessage({ type: "render", html });
      page.posted(frame, true);
    }
  }

  private renderSteps(sessionId: string, steps: number[]): void {
    const panel = this.panels.get(sessionId);
    const s = this.sessions.open.get(sessionId);
    const page = this.pageImages.get(sessionId);
    if (!panel || !s || !page || !this.ready.has(sessionId)) {
      return;
    }
    for (const n of steps) {
      const step = s.transcript.steps.get(n);
      if (step) {
        const frame = page.frame();
        const html = renderStep(s.transcript, step, frame.lookup);
        this.postImages(panel, frame);
        void panel.webview.postMessage({ type: "step", step: n, html });
        page.posted(frame, false);
      }
    }
  }

  dispose(): void {
    this.stopImages();
    for (const p of this.panels.values()) {
      p.dispose();
    }
  }
}

// ---- Status bar ----------------------------------------------------------------------------------

export class StatusBar implements vscode.Disposable {
  readonly item = vscode.window.createStatusBarItem("dsh.status", vscode.StatusBarAlignment.Left, 50);
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly sessions: SessionManager,
    private readonly conn: Connection,
  ) {
    this.item.name = "dsh";
    this.item.command = "dsh.showUsage";
    sessions.onDidChange(() => this.schedule());
    conn.onDidConnect(() => this.schedule());
    conn.onDidDisconnect(() => this.schedule());
    this.update();
    this.item.show();
  }

  private schedule(): void {
    if (!this.timer) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.update();
      }, 100);
    }
  }

  update(): void {
    if (!this.conn.current) {
      this.item.text = this.conn.lastError ? "$(error) dsh: not connected" : "$(hubot) dsh";
      this.item.tooltip = this.conn.lastError ?? "dsh: not connected yet";
      this.item.command = this.conn.lastError ? "dsh.showLog" : "dsh.newSession";
      return;
    }
    this.item.command = "dsh.showUsage";
    const id = this.sessions.active;
    const t = id ? this.sessions.open.get(id)?.transcript : undefined;
    if (!t) {
      this.item.text = "$(hubot) dsh";
      this.item.tooltip = "dsh: no session open";
      return;
    }
    const last = t.lastStep;
    const running = t.running && last?.state === "running";
    const cost = t.sessionCost;
    this.item.text = `${running ? "$(sync~spin)" : "$(hubot)"} dsh ${statusText(last ? { step: last.step, usage: last.usage, running, state: last.state } : undefined, t.totals, cost)}`;
    const md = new vscode.MarkdownString(
      `**${escapeMd(t.title ?? t.sessionId)}**\n\n` +
        (last?.usage ? `step ${last.step}: ${formatUsage(last.usage, last.row?.hitPercent ?? hitPercent(last.usage), last.row?.usage ? last.row.cost : undefined)}\n\n` : "") +
        `Σ ${formatUsage(t.totals, hitPercent(t.totals), cost)}\n\n` +
        (cost ? `${formatCostSaved(cost)}\n\n` : "") +
        `Click for the usage table.`,
    );
    this.item.tooltip = md;
  }

  dispose(): void {
    this.item.dispose();
  }
}

// ---- "What the model saw" -------------------------------------------------------------------------

export const SAW_SCHEME = "dsh-saw";

/** `dsh-saw:/SESSION/step-N.md` (a step's request) and `dsh-saw:/SESSION/usage.md`. */
export function sawUri(sessionId: string, step: number | "usage"): vscode.Uri {
  return vscode.Uri.from({ scheme: SAW_SCHEME, path: `/${sessionId}/${step === "usage" ? "usage" : `step-${step}`}.md` });
}

export class SawProvider implements vscode.TextDocumentContentProvider {
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;

  constructor(private readonly conn: Connection) {}

  async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
    const [, sessionId, file] = uri.path.split("/");
    try {
      const client = await this.conn.get();
      let text: string;
      if (file === "usage.md") {
        text = usageMarkdown(sessionId, await client.usage(sessionId));
      } else {
        const m = /^step-(\d+)\.md$/.exec(file ?? "");
        if (!m) {
          return `not a dsh document: ${uri.toString()}`;
        }
        const r = await client.request(sessionId, Number(m[1]));
        text = renderSaw(r, { sessionId });
      }
      return text;
    } catch (e) {
      return `dsh: could not rebuild ${uri.path}: ${describeError(e)}`;
    }
  }

  refresh(uri: vscode.Uri): void {
    this.changed.fire(uri);
  }
}

function escapeMd(s: string): string {
  return s.replace(/[\\`*_{}[\]()#+\-.!|<>]/g, (c) => `\\${c}`);
}
