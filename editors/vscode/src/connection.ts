// The extension's one connection to the daemon: started on demand from the `dsh.*` settings,
// restarted on request, and clear about why it cannot start.

import * as vscode from "vscode";
import { DshClient, DshStartError, describeError, stdioArgs, type DshOptions } from "./daemon";

export function settings(): { path: string; home: string; baseUrl: string; model: string; inProcess: boolean } {
  const c = vscode.workspace.getConfiguration("dsh");
  return {
    path: c.get<string>("path") || "dsh",
    home: c.get<string>("home") || "",
    baseUrl: c.get<string>("baseUrl") || "",
    model: c.get<string>("model") || "",
    inProcess: c.get<boolean>("inProcess") ?? false,
  };
}

export class Connection implements vscode.Disposable {
  readonly output = vscode.window.createOutputChannel("dsh");
  private client: DshClient | undefined;
  private starting: Promise<DshClient> | undefined;
  private readonly connected = new vscode.EventEmitter<DshClient>();
  private readonly disconnected = new vscode.EventEmitter<string>();
  /** Fires after every successful start (first start and reconnects). */
  readonly onDidConnect = this.connected.event;
  /** Fires when the bridge exits (daemon stopped, crashed, or restarted). */
  readonly onDidDisconnect = this.disconnected.event;
  /** The last start-up failure, for the status bar. */
  lastError: string | undefined;
  /** Clients this extension stopped on purpose: their exit is no news. */
  private readonly retired = new WeakSet<DshClient>();

  constructor(private readonly version: string) {}

  /** The client if connected now. */
  get current(): DshClient | undefined {
    return this.client && !this.client.exitMessage ? this.client : undefined;
  }

  /** The client, starting the bridge when needed; shows the error (with its fix) and rethrows. */
  async get(): Promise<DshClient> {
    const c = this.current;
    if (c) {
      return c;
    }
    if (!this.starting) {
      this.starting = this.start().finally(() => (this.starting = undefined));
    }
    return this.starting;
  }

  /** Like [`get`] but without showing errors (background refreshes). */
  async tryGet(): Promise<DshClient | undefined> {
    try {
      return this.current ?? (await this.get());
    } catch {
      return undefined;
    }
  }

  private async start(): Promise<DshClient> {
    const s = settings();
    const options: DshOptions = {
      path: s.path,
      home: s.home || undefined,
      baseUrl: s.baseUrl || undefined,
      inProcess: s.inProcess,
      cwd: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath,
      clientName: "dsh-vscode",
      clientVersion: this.version,
      trace: (line) => {
        if (line.startsWith("[dsh stderr]") || process.env.DSH_VSCODE_TRACE) {
          this.output.appendLine(line);
        }
      },
    };
    // The arguments it really gets, the base URL left out (it may hold what a log should not).
    const args = stdioArgs(options).map((a, i, all) => (all[i - 1] === "--base-url" ? "(base URL)" : a));
    this.output.appendLine(`starting ${s.path} ${args.join(" ")}`);
    try {
      const client = await DshClient.start(options);
      this.lastError = undefined;
      this.client = client;
      this.output.appendLine(`connected: ${client.info.serverInfo.name} ${client.info.serverInfo.version}, protocol ${client.info.protocolVersion}`);
      client.onExit((message) => {
        if (this.client === client) {
          this.client = undefined;
        }
        this.output.appendLine(message);
        if (!this.retired.has(client)) {
          this.disconnected.fire(message);
        }
      });
      this.connected.fire(client);
      return client;
    } catch (e) {
      const message = describeError(e);
      this.lastError = message;
      this.output.appendLine(`start failed: ${message}`);
      void this.showStartError(e);
      throw e;
    }
  }

  private async showStartError(e: unknown): Promise<void> {
    const message = describeError(e);
    const actions = e instanceof DshStartError && e.kind === "missing" ? ["Open Settings", "Show Output"] : ["Show Output", "Open Settings"];
    const pick = await vscode.window.showErrorMessage(`dsh: ${message}`, ...actions);
    if (pick === "Open Settings") {
      await vscode.commands.executeCommand("workbench.action.openSettings", "dsh.path");
    } else if (pick === "Show Output") {
      this.output.show();
    }
  }

  /** Stops the daemon (`daemon/shutdown`, unless it runs in the bridge) and starts it again. */
  async restart(): Promise<DshClient> {
    const old = this.current;
    if (old) {
      this.retired.add(old);
      if (!settings().inProcess) {
        await old.shutdown().catch(() => undefined);
      }
      old.kill();
      await old.waitExit(10_000);
      this.client = undefined;
      this.disconnected.fire("restarting the daemon");
    }
    return this.get();
  }

  dispose(): void {
    if (this.client) {
      this.retired.add(this.client);
      this.client.kill();
    }
    this.output.dispose();
    this.connected.dispose();
    this.disconnected.dispose();
  }
}
