// Sessions the extension shows: the daemon's list for the workspace, and the open ones, each a
// subscription from seq 0 feeding a transcript, with its usage rows fetched from the daemon after
// every step. Approval requests become native prompts.

import * as vscode from "vscode";
import type { Connection } from "./connection";
import { describeError, RpcError, type DshClient, type Subscription } from "./daemon";
import { ErrorCodes, type ApprovalChoice, type SessionEvent, type SessionSummary } from "./protocol.generated";
import { Transcript, approvalChoices, approvalPrompt, type ApprovalView } from "./transcript";

export class OpenSession {
  readonly transcript: Transcript;
  sub: Subscription | undefined;
  /** The subscribe in flight, so concurrent openers share it. */
  subscribing: Promise<void> | undefined;
  private usageTimer: NodeJS.Timeout | undefined;

  constructor(readonly id: string) {
    this.transcript = new Transcript(id);
  }

  scheduleUsage(fn: () => void): void {
    clearTimeout(this.usageTimer);
    this.usageTimer = setTimeout(fn, 120);
  }
}

export type SessionChange = { sessionId?: string; structural: boolean; step?: number };

export class SessionManager implements vscode.Disposable {
  readonly open = new Map<string, OpenSession>();
  summaries: SessionSummary[] = [];
  /** The session commands act on when not told which. */
  active: string | undefined;
  private readonly changed = new vscode.EventEmitter<SessionChange>();
  readonly onDidChange = this.changed.event;
  private readonly asked = new Set<string>();
  /** The answer chosen for each approval (the end-to-end test checks it came from the button). */
  readonly answered = new Map<string, ApprovalChoice | "dismissed">();
  private readonly disposables: vscode.Disposable[] = [];

  constructor(private readonly conn: Connection) {
    this.disposables.push(
      conn.onDidConnect((client) => void this.resubscribeAll(client)),
      conn.onDidDisconnect(() => {
        for (const s of this.open.values()) {
          s.sub = undefined;
        }
        this.changed.fire({ structural: true });
      }),
    );
  }

  /** Workspace folder the extension's sessions live in. */
  get workspace(): string | undefined {
    return vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  }

  async refreshList(): Promise<SessionSummary[]> {
    const client = await this.conn.get();
    const ws = this.workspace;
    const r = await client.listSessions(ws);
    this.summaries = r.sessions;
    this.changed.fire({ structural: true });
    return this.summaries;
  }

  /** The list without firing a change (the tree asks for it while redrawing). */
  async refreshListQuiet(): Promise<SessionSummary[]> {
    const client = await this.conn.get();
    const r = await client.listSessions(this.workspace);
    this.summaries = r.sessions;
    return this.summaries;
  }

  /** Tells the views the active session changed. */
  fireActive(): void {
    this.changed.fire({ structural: false });
  }

  /** Creates a session in the workspace (`images`: for a prompt with images) and opens it. */
  async create(o: { images?: boolean } = {}): Promise<string> {
    const client = await this.conn.get();
    const ws = this.workspace;
    if (!ws) {
      throw new Error("open a folder first: a dsh session works inside a workspace folder");
    }
    const model = vscode.workspace.getConfiguration("dsh").get<string>("model") || undefined;
    const { sessionId } = await client.createSession(ws, model, undefined, o);
    await this.openSession(sessionId);
    this.active = sessionId;
    await this.refreshList().catch(() => undefined);
    return sessionId;
  }

  /** Subscribes to a session from seq 0 (once); later calls return the same transcript. */
  async openSession(id: string): Promise<OpenSession> {
    let s = this.open.get(id);
    if (!s) {
      s = new OpenSession(id);
      this.open.set(id, s);
    }
    if (!s.sub) {
      const client = await this.conn.get();
      await this.subscribe(client, s);
    }
    return s;
  }

  /** Subscribes from the seq after the last one seen (0 at first): no gap, no duplicate. */
  private subscribe(client: DshClient, s: OpenSession): Promise<void> {
    if (!s.subscribing) {
      s.subscribing = (async () => {
        const from = s.transcript.lastSeq + 1;
        s.sub = await client.subscribe(s.id, from, (e) => this.onEvent(s, e));
        this.refreshUsage(s);
      })().finally(() => (s.subscribing = undefined));
    }
    return s.subscribing;
  }

  private async resubscribeAll(client: DshClient): Promise<void> {
    for (const s of this.open.values()) {
      if (!s.sub) {
        try {
          await this.subscribe(client, s);
        } catch (e) {
          this.conn.output.appendLine(`resubscribe ${s.id}: ${describeError(e)}`);
        }
      }
    }
    await this.refreshList().catch(() => undefined);
  }

  private onEvent(s: OpenSession, e: SessionEvent): void {
    const change = s.transcript.apply(e);
    if (change.kind === "none") {
      return;
    }
    switch (e.type) {
      case "step/end":
      case "step/error":
      case "step/start":
      case "turn/end":
      case "surface/replace":
        s.scheduleUsage(() => this.refreshUsage(s));
        break;
      case "approval/request": {
        const a = e.data.approvalId;
        // Replayed requests that were answered get their decision right after; ask only for
        // those still waiting once the burst has passed.
        setTimeout(() => {
          const view = s.transcript.pendingApprovals.get(a);
          if (view) {
            void this.ask(s, view);
          }
        }, 250);
        break;
      }
    }
    if (e.type === "turn/end" || e.type === "turn/start") {
      void this.refreshList().catch(() => undefined);
    }
    this.changed.fire({ sessionId: s.id, structural: change.kind === "structure", step: change.kind === "step" ? change.step : undefined });
  }

  refreshUsage(s: OpenSession): void {
    const client = this.conn.current;
    if (!client) {
      return;
    }
    client.usage(s.id).then(
      (u) => {
        s.transcript.applyUsage(u);
        this.changed.fire({ sessionId: s.id, structural: true });
      },
      (e) => this.conn.output.appendLine(`session/usage ${s.id}: ${describeError(e)}`),
    );
  }

  /** The native approval prompt: Allow / Deny / Allow always, and for a confined command
   * Allow once, unconfined. */
  private async ask(s: OpenSession, a: ApprovalView): Promise<void> {
    if (this.asked.has(a.approvalId)) {
      return;
    }
    this.asked.add(a.approvalId);
    const choices = approvalChoices(a);
    const pick = await vscode.window.showInformationMessage(
      approvalPrompt(a),
      { modal: false },
      ...choices.map((c) => c.label),
    );
    const decision: ApprovalChoice | undefined = choices.find((c) => c.label === pick)?.choice;
    this.answered.set(a.approvalId, decision ?? "dismissed");
    if (!decision) {
      // Dismissed: ask again from the transcript's "answer" button; the daemon denies on timeout.
      this.asked.delete(a.approvalId);
      return;
    }
    await this.respond(s.id, a.approvalId, decision);
  }

  async respond(sessionId: string, approvalId: string, decision: ApprovalChoice): Promise<void> {
    try {
      const client = await this.conn.get();
      const r = await client.respondApproval(sessionId, approvalId, decision);
      if (!r.accepted) {
        void vscode.window.showWarningMessage("dsh: the tool call no longer waits for an answer.");
      }
    } catch (e) {
      if (e instanceof RpcError && e.code === ErrorCodes.approvalNotFound) {
        void vscode.window.showWarningMessage(`dsh: that approval is gone (answered elsewhere or timed out).`);
      } else {
        void vscode.window.showErrorMessage(`dsh: ${describeError(e)}`);
      }
    }
  }

  /** Asks again for a pending approval (the transcript's "answer" button). */
  async askAgain(sessionId: string, approvalId: string): Promise<void> {
    const s = this.open.get(sessionId);
    const view = s?.transcript.pendingApprovals.get(approvalId);
    if (s && view) {
      this.asked.delete(approvalId);
      await this.ask(s, view);
    }
  }

  /** Closes a session's subscription (its transcript is dropped). */
  async close(id: string): Promise<void> {
    const s = this.open.get(id);
    this.open.delete(id);
    await s?.sub?.dispose();
  }

  dispose(): void {
    for (const d of this.disposables) {
      d.dispose();
    }
    this.changed.dispose();
  }
}
