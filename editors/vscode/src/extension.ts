// dsh for VS Code: a thin client of the dsh daemon. All behavior lives in the daemon; this
// extension starts `dsh stdio`, shows what the session log says, and sends the user's requests.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";
import { Connection } from "./connection";
import { describeError, type DshClient } from "./daemon";
import { IMAGE_EXTENSIONS, ImageCache, promptSession, writeImageFile } from "./images";
import { askPrompt } from "./promptInput";
import type { ApprovalChoice, SessionPromptResult, WhenBusy } from "./protocol.generated";
import { rewind, type RewindOutcome } from "./rewind";
import { SessionManager, type SessionChange } from "./sessions";
import type { Transcript } from "./transcript";
import { formatUsage, hitPercent } from "./usage";
import { SAW_SCHEME, SawProvider, SessionsTree, StatusBar, TranscriptPanels, sawUri, type TreeNode } from "./views";

/** What commands accept besides tree nodes: explicit arguments (scripts, the end-to-end test);
 * `images` are image files to attach to a prompt (paths). */
export type SessionArg = { sessionId?: string; step?: number; text?: string; whenBusy?: WhenBusy; images?: string[] } | string | TreeNode | undefined;

/**
 * What `activate()` returns: the state the end-to-end test checks besides what the `dsh.*`
 * commands return. The test runs from a separate, never shipped extension (`e2e/driver/` in the
 * source tree) that drives this one through its commands and reads these to see what the views
 * show. Only what those checks need; not an API for other extensions, and it may change.
 */
export type DshTestApi = {
  /** The daemon client, starting the bridge when needed; a start failure is shown and rethrown. */
  client(): Promise<DshClient>;
  /** The live transcript of an open session. */
  transcript(sessionId: string): Transcript | undefined;
  /** Whether an open session is subscribed to the daemon's events. */
  subscribed(sessionId: string): boolean;
  /** Fires as the open sessions change (every streamed chunk included). */
  onDidChange: vscode.Event<SessionChange>;
  /** The answer an approval got from the native notification (`dismissed`: closed unanswered). */
  approvalAnswer(approvalId: string): ApprovalChoice | "dismissed" | undefined;
  /** The HTML last posted to the session's transcript panel; undefined when it has no panel. */
  transcriptHtml(sessionId: string): string | undefined;
  /** The Sessions tree: its data (node → tree item) and its view. */
  tree: Pick<SessionsTree, "getChildren" | "getTreeItem" | "getParent">;
  treeView: vscode.TreeView<TreeNode>;
  /** The status bar item's text, brought up to date first. */
  statusText(): string;
};

let connection: Connection | undefined;

/** A session the user asked for that does not exist yet (see `targetOf`). */
const NEW_SESSION = Symbol("a new session");

export function activate(context: vscode.ExtensionContext): DshTestApi {
  const version = (context.extension.packageJSON as { version?: string }).version ?? "0";
  const conn = new Connection(version);
  const sessions = new SessionManager(conn);
  // Images of the transcripts, fetched once per hash (`session/object`).
  const images = new ImageCache(async (sessionId, sha256) => (await conn.get()).object(sessionId, sha256), describeError);
  const panels = new TranscriptPanels(sessions, images, (sessionId, m) => {
    switch (m.action) {
      case "openImage":
        // The page's message is checked like any argument (dsh.openImage refuses a bad hash).
        void vscode.commands.executeCommand("dsh.openImage", { sessionId, sha256: m.sha256 });
        break;
      case "saw":
        void vscode.commands.executeCommand("dsh.whatTheModelSaw", { sessionId, step: m.step });
        break;
      case "diff":
        void vscode.commands.executeCommand("dsh.diffStep", { sessionId, step: m.step });
        break;
      case "fork":
        void vscode.commands.executeCommand("dsh.fork", { sessionId, step: m.step });
        break;
      case "rewind":
        void vscode.commands.executeCommand("dsh.rewind", { sessionId, step: m.step });
        break;
      case "openChild":
        if (m.session) {
          void vscode.commands.executeCommand("dsh.openSession", m.session);
        }
        break;
      case "approve":
        if (m.approval) {
          void sessions.askAgain(sessionId, m.approval);
        }
        break;
    }
  });
  const saw = new SawProvider(conn);
  const status = new StatusBar(sessions, conn);
  const tree = new SessionsTree(sessions);
  const treeView = vscode.window.createTreeView("dsh.sessions", { treeDataProvider: tree, showCollapseAll: true });
  connection = conn;
  /** The private directory images open from (0700, removed when the extension stops). */
  let imageDir: string | undefined;

  context.subscriptions.push(
    conn,
    sessions,
    panels,
    status,
    treeView,
    vscode.workspace.registerTextDocumentContentProvider(SAW_SCHEME, saw),
    vscode.window.registerWebviewPanelSerializer("dsh.transcript", { deserializeWebviewPanel: (panel, state) => panels.restore(panel, state) }),
    // A daemon started again may serve an image the last one could not.
    conn.onDidConnect(() => images.forgetFailures()),
    { dispose: () => imageDir && rmSync(imageDir, { recursive: true, force: true }) },
    conn.onDidDisconnect((why) => {
      if (why !== "restarting the daemon") {
        void vscode.window.showWarningMessage(`dsh: lost the daemon (${why}). It restarts with the next command.`, "Reconnect").then((pick) => {
          if (pick === "Reconnect") {
            void conn.get().catch(() => undefined);
          }
        });
      }
    }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("dsh.path") || e.affectsConfiguration("dsh.home") || e.affectsConfiguration("dsh.baseUrl") || e.affectsConfiguration("dsh.inProcess")) {
        void vscode.window.showInformationMessage("dsh: settings changed; restart the daemon connection to use them.", "Restart Daemon").then((pick) => {
          if (pick) {
            void vscode.commands.executeCommand("dsh.restartDaemon");
          }
        });
      }
    }),
  );

  const register = (id: string, fn: (...args: never[]) => unknown) => context.subscriptions.push(vscode.commands.registerCommand(id, fn as (...a: unknown[]) => unknown));

  /** The session an argument names, else the active one, else one the user picks. */
  async function sessionOf(arg: SessionArg): Promise<string | undefined> {
    const target = await targetOf(arg, { allowNew: false });
    return target === NEW_SESSION ? undefined : target;
  }

  /** The session an argument names, else the active one, else one the user picks; with
   * `allowNew`, `NEW_SESSION` when there is none or the user picks a new one (the caller creates
   * it once it knows what it is for). */
  async function targetOf(arg: SessionArg, o: { allowNew: boolean }): Promise<string | typeof NEW_SESSION | undefined> {
    if (typeof arg === "string") {
      return arg;
    }
    if (arg && "kind" in arg) {
      return arg.kind === "session" ? arg.summary.sessionId : arg.sessionId;
    }
    if (arg?.sessionId) {
      return arg.sessionId;
    }
    if (sessions.active) {
      return sessions.active;
    }
    const list = await sessions.refreshList();
    if (list.length === 0) {
      return o.allowNew ? NEW_SESSION : undefined;
    }
    const pick = await vscode.window.showQuickPick(
      [
        ...(o.allowNew ? [{ label: "$(add) New session", id: "" }] : []),
        ...[...list].reverse().map((s) => ({ label: s.title ?? s.sessionId, description: `${s.steps} steps · ${s.sessionId}`, id: s.sessionId })),
      ],
      { placeHolder: "dsh session" },
    );
    if (!pick) {
      return undefined;
    }
    return pick.id || NEW_SESSION;
  }

  /** The step an argument names, else one the user picks from the session's steps. */
  async function stepOf(sessionId: string, arg: SessionArg, placeHolder: string): Promise<number | undefined> {
    if (arg && typeof arg === "object" && "kind" in arg) {
      return arg.kind === "step" ? arg.step.step : undefined;
    }
    if (arg && typeof arg === "object" && arg.step !== undefined) {
      return arg.step;
    }
    const s = await sessions.openSession(sessionId);
    const steps = [...s.transcript.steps.values()].reverse();
    if (steps.length === 0) {
      void vscode.window.showInformationMessage("dsh: this session has no step yet.");
      return undefined;
    }
    const pick = await vscode.window.showQuickPick(
      steps.map((st) => ({
        label: `Step ${st.step}`,
        description: `turn ${st.turn} · seq ${st.seq}`,
        detail: st.usage ? formatUsage(st.usage, st.row?.hitPercent ?? hitPercent(st.usage), st.row?.usage ? st.row.cost : undefined) : st.state,
        step: st.step,
      })),
      { placeHolder },
    );
    return pick?.step;
  }

  async function guard<T>(what: string, fn: () => Promise<T>): Promise<T | undefined> {
    try {
      return await fn();
    } catch (e) {
      void vscode.window.showErrorMessage(`dsh: ${what}: ${describeError(e)}`);
      return undefined;
    }
  }

  register("dsh.newSession", () =>
    guard("new session", async () => {
      const id = await sessions.create();
      await panels.show(id);
      return id;
    }),
  );

  register("dsh.openSession", (arg: SessionArg) =>
    guard("open session", async () => {
      const id = await sessionOf(arg);
      if (id) {
        await panels.show(id);
      }
      return id;
    }),
  );

  register("dsh.revealStep", (sessionId: string, step: number) => panels.reveal(sessionId, step));

  /** Image files the user picks to attach (png, jpg, gif, webp; the daemon checks the bytes). */
  async function pickImages(): Promise<string[] | undefined> {
    const ws = vscode.workspace.workspaceFolders?.[0]?.uri;
    const picked = await vscode.window.showOpenDialog({
      canSelectMany: true,
      canSelectFolders: false,
      openLabel: "Attach",
      title: "Attach images to the prompt",
      filters: { Images: IMAGE_EXTENSIONS },
      ...(ws ? { defaultUri: ws } : {}),
    });
    return picked?.map((u) => u.fsPath);
  }

  /** `dsh: Prompt` and `dsh: Prompt with Image…`: the text (and images) from the arguments or the
   * prompt box, sent to the session (queued or as steering when a turn runs). A new session is
   * created only once the prompt is ready and its images are read, saying it is for images (a
   * model that reads none is refused before anything is created). The daemon's refusal of an
   * image (a model that reads none, bytes that are no image, too large) is shown with its own
   * words. */
  async function promptCommand(arg: SessionArg, withImage: boolean): Promise<SessionPromptResult | { error: string } | undefined> {
    const given = typeof arg === "object" && arg && !("kind" in arg) ? arg : undefined;
    let files = given?.images ?? [];
    if (withImage && files.length === 0) {
      files = (await pickImages()) ?? [];
      if (files.length === 0) {
        return undefined;
      }
    }
    const target = await targetOf(arg, { allowNew: true });
    if (!target) {
      return undefined;
    }
    const existing = target === NEW_SESSION ? undefined : target;
    const s = existing ? await sessions.openSession(existing) : undefined;
    if (existing) {
      await panels.show(existing, vscode.ViewColumn.Active);
    }
    let text = given?.text;
    if (text === undefined) {
      // The prompt commands are the workspace's: a new session's box asks another session of it.
      const asked = existing ?? sessions.summaries.at(-1)?.sessionId;
      const answer = await askPrompt(
        async () => (asked ? (await (await conn.get()).commands(asked)).commands : []),
        "Prompt dsh",
        "What should the agent do? (/ for the workspace's prompt commands)",
        { images: files, pickImages },
      );
      if (!answer) {
        return undefined;
      }
      ({ text, images: files } = answer);
    }
    if (!text) {
      return undefined;
    }
    let whenBusy = given?.whenBusy;
    if (existing && s?.transcript.running && !whenBusy) {
      // Steering is text only: a prompt with images waits for its turn.
      const steer = files.length === 0 ? ["Steer the running turn with it"] : [];
      const pick = await vscode.window.showQuickPick([...steer, "Queue it after the running turn"], { placeHolder: "A turn is running" });
      if (!pick) {
        return undefined;
      }
      if (pick.startsWith("Steer")) {
        await (await conn.get()).inject(existing, text);
        return undefined;
      }
      whenBusy = "queue";
    }
    const client = await conn.get();
    try {
      const { sessionId, attachments } = await promptSession(existing ?? ((o) => sessions.create(o)), files);
      if (!existing) {
        await panels.show(sessionId, vscode.ViewColumn.Active);
      }
      const r = await client.prompt(sessionId, text, whenBusy, attachments);
      if (r.error) {
        void vscode.window.showErrorMessage(`dsh: turn ${r.turn} ended with an error: ${r.error}`, "Show Output").then((p) => p && conn.output.show());
      }
      return r;
    } catch (e) {
      const message = describeError(e);
      void vscode.window.showErrorMessage(`dsh: ${message}`);
      return { error: message };
    }
  }

  register("dsh.prompt", (arg: SessionArg) => guard("prompt", () => promptCommand(arg, false)));

  register("dsh.promptWithImage", (arg: SessionArg) => guard("prompt with image", () => promptCommand(arg, true)));

  /** Opens an image of a session's log full size: its bytes in a file of the extension's private
   * directory (0600 in 0700), shown by the editor's image preview. Returns the file. */
  register("dsh.openImage", (arg: unknown) =>
    guard("open image", async () => {
      const file = await writeImageFile(
        images,
        arg,
        () => (imageDir ??= mkdtempSync(path.join(tmpdir(), "dsh-vscode-images-"))),
        (sessionId, sha256) => sessions.open.get(sessionId)?.transcript.images.find((i) => i.sha256 === sha256)?.name,
      );
      await vscode.commands.executeCommand("vscode.open", vscode.Uri.file(file), { preview: true, viewColumn: vscode.ViewColumn.Beside });
      return file;
    }),
  );

  register("dsh.steer", (arg: SessionArg) =>
    guard("steer", async () => {
      const id = await sessionOf(arg);
      if (!id) {
        return undefined;
      }
      const text = (typeof arg === "object" && arg && !("kind" in arg) ? arg.text : undefined) ?? (await vscode.window.showInputBox({ prompt: "Steer dsh: this joins the next model request", placeHolder: "e.g. use the other API", ignoreFocusOut: true }));
      if (!text) {
        return undefined;
      }
      const r = await (await conn.get()).inject(id, text);
      vscode.window.setStatusBarMessage(`dsh: steering logged at seq ${r.seq}; it joins the next request`, 4000);
      return r;
    }),
  );

  register("dsh.cancel", (arg: SessionArg) =>
    guard("cancel", async () => {
      const id = await sessionOf(arg);
      if (!id) {
        return undefined;
      }
      const r = await (await conn.get()).cancel(id);
      if (!r.cancelled) {
        vscode.window.setStatusBarMessage("dsh: no turn was running", 3000);
      }
      return r;
    }),
  );

  register("dsh.fork", (arg: SessionArg) =>
    guard("fork", async () => {
      const id = await sessionOf(arg);
      if (!id) {
        return undefined;
      }
      const step = await stepOf(id, arg, "Fork before which step's request?");
      if (step === undefined) {
        return undefined;
      }
      // The daemon cuts at the step's boundary (an unknown step is its "out of range" error).
      const { sessionId } = await (await conn.get()).fork(id, step);
      await sessions.openSession(sessionId);
      await panels.show(sessionId);
      await sessions.refreshList();
      vscode.window.setStatusBarMessage(`dsh: forked ${id} before step ${step} into ${sessionId}`, 5000);
      return sessionId;
    }),
  );

  register("dsh.rewind", (arg: SessionArg) =>
    guard("rewind", async (): Promise<RewindOutcome | undefined> => {
      const id = await sessionOf(arg);
      if (!id) {
        return undefined;
      }
      const step = await stepOf(id, arg, "Rewind the files and the conversation to before which step?");
      if (step === undefined) {
        return undefined;
      }
      const outcome = await rewind(await conn.get(), { sessionId: id, step }, {
        unsaved: (paths) => {
          const root = sessions.workspace;
          const dirty = new Set(vscode.workspace.textDocuments.filter((d) => d.isDirty && d.uri.scheme === "file").map((d) => d.uri.fsPath));
          return root ? paths.filter((p) => dirty.has(path.join(root, p))) : [];
        },
        confirm: async (q) => (await vscode.window.showWarningMessage(q.message, { modal: true, detail: q.detail }, q.action)) === q.action,
        overwrite: async (_conflicts, message) => (await vscode.window.showWarningMessage("Overwrite files changed by someone else?", { modal: true, detail: message }, "Overwrite")) === "Overwrite",
      });
      switch (outcome.kind) {
        case "busy":
          void vscode.window.showWarningMessage(outcome.message, "Cancel the Turn").then((pick) => pick && vscode.commands.executeCommand("dsh.cancel", { sessionId: id }));
          break;
        case "done": {
          // The session that continues (the fork) is where the prompt box sends next.
          const next = outcome.result.sessionId;
          await sessions.openSession(next);
          await panels.show(next);
          await sessions.refreshList();
          void vscode.window.showInformationMessage(outcome.message);
          break;
        }
        case "cancelled":
          break;
      }
      return outcome;
    }),
  );

  register("dsh.whatTheModelSaw", (arg: SessionArg) =>
    guard("what the model saw", async () => {
      const id = await sessionOf(arg);
      if (!id) {
        return undefined;
      }
      const step = await stepOf(id, arg, "What the model saw at which step?");
      if (step === undefined) {
        return undefined;
      }
      const uri = sawUri(id, step);
      const doc = await vscode.workspace.openTextDocument(uri);
      await vscode.window.showTextDocument(doc, { preview: false, viewColumn: vscode.ViewColumn.Beside });
      return uri.toString();
    }),
  );

  register("dsh.diffStep", (arg: SessionArg) =>
    guard("diff", async () => {
      const id = await sessionOf(arg);
      if (!id) {
        return undefined;
      }
      const step = await stepOf(id, arg, "Diff which step's request with the step before?");
      if (step === undefined) {
        return undefined;
      }
      if (step < 2) {
        void vscode.window.showInformationMessage("dsh: step 1 has no previous request to diff with.");
        return undefined;
      }
      const left = sawUri(id, step - 1);
      const right = sawUri(id, step);
      await vscode.commands.executeCommand("vscode.diff", left, right, `dsh: step ${step - 1} ↔ step ${step} (what the model saw)`, { preview: false, viewColumn: vscode.ViewColumn.Beside });
      return [left.toString(), right.toString()];
    }),
  );

  register("dsh.compact", (arg: SessionArg) =>
    guard("compact", async () => {
      const id = await sessionOf(arg);
      if (!id) {
        return undefined;
      }
      const r = await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: "dsh: compacting…" }, async () => (await conn.get()).compact(id));
      void vscode.window.showInformationMessage(`dsh: ${r.message}`);
      return r;
    }),
  );

  register("dsh.showUsage", (arg: SessionArg) =>
    guard("usage", async () => {
      const id = await sessionOf(arg);
      if (!id) {
        return undefined;
      }
      const uri = sawUri(id, "usage");
      saw.refresh(uri);
      await vscode.window.showTextDocument(await vscode.workspace.openTextDocument(uri), { preview: true, viewColumn: vscode.ViewColumn.Beside });
      return uri.toString();
    }),
  );

  register("dsh.refresh", () => guard("refresh", () => sessions.refreshList()));

  register("dsh.restartDaemon", () =>
    guard("restart", async () => {
      await vscode.window.withProgress({ location: vscode.ProgressLocation.Notification, title: "dsh: restarting the daemon…" }, () => conn.restart());
      return sessions.refreshList();
    }),
  );

  register("dsh.showLog", () => conn.output.show());

  return {
    client: () => conn.get(),
    transcript: (id) => sessions.open.get(id)?.transcript,
    subscribed: (id) => sessions.open.get(id)?.sub !== undefined,
    onDidChange: sessions.onDidChange,
    approvalAnswer: (id) => sessions.answered.get(id),
    transcriptHtml: (id) => (panels.panels.has(id) ? (panels.lastHtml.get(id) ?? "") : undefined),
    tree,
    treeView,
    statusText: () => {
      status.update();
      return status.item.text;
    },
  };
}

export function deactivate(): void {
  connection?.dispose();
}
