// Starting `dsh stdio` and speaking the dsh protocol through it: a typed method per RPC method,
// subscriptions, and start-up errors that say what to fix. No `vscode` import.

import { spawn, type ChildProcess } from "node:child_process";
import {
  ErrorCodes,
  Methods,
  PROTOCOL_VERSION,
  type ApprovalChoice,
  type ApprovalRespondResult,
  type Attachment,
  type DaemonShutdownResult,
  type DaemonStatusResult,
  type InitializeResult,
  type SessionCancelResult,
  type SessionCommandsResult,
  type SessionCompactResult,
  type SessionConfig,
  type SessionEvent,
  type SessionEventsResult,
  type SessionIdResult,
  type SessionInjectResult,
  type SessionListResult,
  type SessionObjectResult,
  type SessionPromptResult,
  type SessionCheckpointsResult,
  type SessionRequestResult,
  type SessionRewindParams,
  type SessionRewindResult,
  type SessionUsageResult,
  type WhenBusy,
} from "./protocol.generated";
import { RpcClient, RpcError } from "./rpc";

export { RpcError } from "./rpc";

/** How to start the bridge. */
export type DshOptions = {
  /** The binary: a name looked up on PATH or a path (setting `dsh.path`). */
  path: string;
  /** `--home` (setting `dsh.home`). */
  home?: string;
  /** `--base-url` (setting `dsh.baseUrl`). */
  baseUrl?: string;
  /** `stdio --in-process`: a private daemon inside the bridge. */
  inProcess?: boolean;
  /** Environment of the bridge (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** Working directory of the bridge. */
  cwd?: string;
  /** Reported in `initialize`. */
  clientName?: string;
  clientVersion?: string;
  /** Receives every line sent and received, and the bridge's stderr. */
  trace?: (line: string) => void;
  /** How long to wait for `initialize` (ms). */
  startTimeoutMs?: number;
};

/** Why the daemon could not be reached, worded for the user. */
export type StartFailure = "missing" | "failed" | "protocol";

export class DshStartError extends Error {
  constructor(
    readonly kind: StartFailure,
    message: string,
    readonly stderr = "",
  ) {
    super(message);
    this.name = "DshStartError";
  }
}

/** The argument vector for `dsh [--home H] [--base-url U] stdio [--in-process]`: the base URL
 * only for an in-process daemon (its sessions' default); through a shared daemon it goes with
 * each session this client creates ([`DshClient.createSession`]). */
export function stdioArgs(o: Pick<DshOptions, "home" | "baseUrl" | "inProcess">): string[] {
  const args: string[] = [];
  if (o.home) {
    args.push("--home", o.home);
  }
  if (o.baseUrl && o.inProcess) {
    args.push("--base-url", o.baseUrl);
  }
  args.push("stdio");
  if (o.inProcess) {
    args.push("--in-process");
  }
  return args;
}

/** A live subscription to one session's events. */
export type Subscription = {
  readonly id: string;
  readonly sessionId: string;
  dispose(): Promise<void>;
};

type EventNotification = { subscription: number | string; result: SessionEvent };

const STDERR_KEEP = 16 * 1024;

/** A connection to the dsh daemon through a `dsh stdio` child process. */
export class DshClient {
  private readonly listeners = new Map<string, (e: SessionEvent) => void>();
  /** Events whose subscription id is not known yet (they can beat the subscribe answer). */
  private readonly early = new Map<string, SessionEvent[]>();
  private stderr = "";
  private exitHandlers = new Set<(message: string) => void>();
  private exited: string | undefined;

  private constructor(
    private readonly child: ChildProcess,
    readonly rpc: RpcClient,
    readonly options: DshOptions,
  ) {}

  /** The server's `initialize` answer. */
  info!: InitializeResult;

  /** Spawns the bridge and runs `initialize`; throws [`DshStartError`] with the fix in words. */
  static async start(options: DshOptions): Promise<DshClient> {
    const args = stdioArgs(options);
    const child = spawn(options.path, args, {
      env: options.env ?? process.env,
      cwd: options.cwd,
      stdio: ["pipe", "pipe", "pipe"],
    });
    const rpc = new RpcClient(child.stdout!, child.stdin!, options.trace);
    const client = new DshClient(child, rpc, options);
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (s: string) => {
      client.stderr = (client.stderr + s).slice(-STDERR_KEEP);
      options.trace?.(`[dsh stderr] ${s.trimEnd()}`);
    });
    rpc.onNotification(Methods.SessionEvent, (p) => client.onEvent(p as EventNotification));

    const spawnError = new Promise<never>((_, reject) => {
      child.once("error", (e: NodeJS.ErrnoException) => {
        rpc.close(e);
        if (e.code === "ENOENT" || e.code === "EACCES") {
          reject(
            new DshStartError(
              "missing",
              `dsh binary not found: tried "${options.path}"` +
                (options.path.includes("/") ? "" : " on PATH") +
                ` (${e.code}). Install dsh or set the setting "dsh.path" to the absolute path of the dsh binary.`,
            ),
          );
        } else {
          reject(new DshStartError("failed", `could not start "${options.path}": ${e.message}`));
        }
      });
    });
    const exited = new Promise<never>((_, reject) => {
      child.once("exit", (code, signal) => {
        // Let the last stderr bytes arrive before wording the error.
        setTimeout(() => {
          const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
          client.exited = `the dsh daemon bridge (${options.path} ${args.join(" ")}) ${how}`;
          rpc.close(new Error(client.exited));
          for (const h of client.exitHandlers) {
            h(client.exited);
          }
          reject(
            new DshStartError(
              "failed",
              `the dsh daemon failed to start: \`${options.path} ${args.join(" ")}\` ${how}` +
                (client.stderr.trim() ? `:\n${client.stderr.trim()}` : " and printed nothing on stderr."),
              client.stderr,
            ),
          );
        }, 50);
      });
    });
    exited.catch(() => undefined);
    spawnError.catch(() => undefined);
    const timeoutMs = options.startTimeoutMs ?? 20_000;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new DshStartError(
              "failed",
              `the dsh daemon did not answer \`initialize\` within ${timeoutMs / 1000} s` +
                (client.stderr.trim() ? `; its stderr:\n${client.stderr.trim()}` : "."),
              client.stderr,
            ),
          ),
        timeoutMs,
      );
    });
    try {
      client.info = await Promise.race([
        rpc.request<InitializeResult>(Methods.Initialize, {
          clientInfo: { name: options.clientName ?? "dsh-vscode", version: options.clientVersion },
          protocolVersion: PROTOCOL_VERSION,
        }),
        spawnError,
        exited,
        timeout,
      ]);
    } catch (e) {
      client.kill();
      if (e instanceof DshStartError) {
        throw e;
      }
      if (e instanceof RpcError && e.code === ErrorCodes.unsupportedProtocol) {
        throw new DshStartError("protocol", `the dsh daemon speaks another protocol version: ${e.message}`);
      }
      // The connection closed under the request: the exit handler has the better words.
      const better = await Promise.race([exited, spawnError, delay(500).then(() => undefined)]).catch((x: unknown) => x);
      if (better instanceof DshStartError) {
        throw better;
      }
      throw new DshStartError("failed", `the dsh daemon did not start: ${(e as Error).message}`, client.stderr);
    } finally {
      clearTimeout(timer);
    }
    return client;
  }

  /** The bridge's stderr, last 16 KiB. */
  get stderrTail(): string {
    return this.stderr;
  }

  /** Set when the bridge process has exited. */
  get exitMessage(): string | undefined {
    return this.exited;
  }

  /** Calls `handler` when the bridge exits (daemon gone, connection lost). */
  onExit(handler: (message: string) => void): () => void {
    this.exitHandlers.add(handler);
    return () => this.exitHandlers.delete(handler);
  }

  /** Closes stdin (the bridge exits) and kills it if it lingers. */
  kill(): void {
    this.rpc.close();
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.stdin?.end();
      const t = setTimeout(() => this.child.kill("SIGTERM"), 1000);
      t.unref();
      this.child.once("exit", () => clearTimeout(t));
    }
  }

  /** Waits for the bridge to exit (at most `ms`). */
  waitExit(ms = 5000): Promise<boolean> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) {
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const t = setTimeout(() => resolve(false), ms);
      this.child.once("exit", () => {
        clearTimeout(t);
        resolve(true);
      });
    });
  }

  // ---- methods --------------------------------------------------------------------------

  /** Creates a session. Through a shared daemon (`dsh stdio` without `--in-process`), the
   * `dsh.baseUrl` setting goes with it (`config.baseUrl`: the session's own ad-hoc profile, since
   * that daemon serves other clients too); an in-process daemon has it as its default already.
   * `images`: the session is for a prompt with images (a model that reads none is refused,
   * `imagesUnsupported`, before anything is created). */
  createSession(workspace: string, model?: string, config?: SessionConfig, o: { images?: boolean } = {}): Promise<SessionIdResult> {
    const baseUrl = this.options.baseUrl && !this.options.inProcess && !config?.baseUrl ? this.options.baseUrl : undefined;
    const withUrl = baseUrl ? { ...config, baseUrl } : config;
    return this.rpc.request(Methods.SessionCreate, { workspace, ...(model ? { model } : {}), ...(withUrl ? { config: withUrl } : {}), ...(o.images ? { images: true } : {}) });
  }

  listSessions(workspace?: string): Promise<SessionListResult> {
    return this.rpc.request(Methods.SessionList, workspace ? { workspace } : {});
  }

  /** Subscribes; `onEvent` gets the stored events from `fromSeq`, then live ones. */
  async subscribe(sessionId: string, fromSeq: number, onEvent: (e: SessionEvent) => void): Promise<Subscription> {
    const raw = await this.rpc.request<number | string>(Methods.SessionSubscribe, { sessionId, fromSeq });
    const id = String(raw);
    this.listeners.set(id, onEvent);
    const early = this.early.get(id);
    this.early.delete(id);
    for (const e of early ?? []) {
      onEvent(e);
    }
    return {
      id,
      sessionId,
      dispose: async () => {
        this.listeners.delete(id);
        if (!this.rpc.closedReason) {
          await this.rpc.request(Methods.SessionUnsubscribe, [raw]).catch(() => undefined);
        }
      },
    };
  }

  /** Runs a turn; `attachments` are images given with the prompt (base64; the daemon checks them
   * and refuses, before logging anything, a model that reads no images or bytes that are none). */
  prompt(sessionId: string, text: string, whenBusy?: WhenBusy, attachments?: Attachment[]): Promise<SessionPromptResult> {
    return this.rpc.request(Methods.SessionPrompt, { sessionId, text, ...(whenBusy ? { whenBusy } : {}), ...(attachments?.length ? { attachments } : {}) });
  }

  /** The bytes of an object the session's log names (an image), base64 (`session/object`). */
  object(sessionId: string, sha256: string): Promise<SessionObjectResult> {
    return this.rpc.request(Methods.SessionObject, { sessionId, sha256 });
  }

  /** The prompt commands and skills of the session's workspace (`session/commands`). */
  commands(sessionId: string): Promise<SessionCommandsResult> {
    return this.rpc.request(Methods.SessionCommands, { sessionId });
  }

  inject(sessionId: string, text: string): Promise<SessionInjectResult> {
    return this.rpc.request(Methods.SessionInject, { sessionId, text });
  }

  cancel(sessionId: string): Promise<SessionCancelResult> {
    return this.rpc.request(Methods.SessionCancel, { sessionId });
  }

  /** Forks `sessionId` at the boundary of step `atStep` (what came before its request), or whole. */
  fork(sessionId: string, atStep?: number, config?: SessionConfig): Promise<SessionIdResult> {
    return this.rpc.request(Methods.SessionFork, {
      sessionId,
      ...(atStep !== undefined ? { atStep } : {}),
      ...(config ? { config } : {}),
    });
  }

  /** Rewinds the workspace's files and/or the conversation (`session/rewind`); with `dryRun`,
   * says what it would do. The answer's `sessionId` is the session that continues. */
  rewind(params: SessionRewindParams): Promise<SessionRewindResult> {
    return this.rpc.request(Methods.SessionRewind, params);
  }

  checkpoints(sessionId: string): Promise<SessionCheckpointsResult> {
    return this.rpc.request(Methods.SessionCheckpoints, { sessionId });
  }

  request(sessionId: string, step: number, diff?: boolean): Promise<SessionRequestResult> {
    return this.rpc.request(Methods.SessionRequest, { sessionId, step, ...(diff ? { diff } : {}) });
  }

  usage(sessionId: string): Promise<SessionUsageResult> {
    return this.rpc.request(Methods.SessionUsage, { sessionId });
  }

  events(sessionId: string, fromSeq: number, limit: number): Promise<SessionEventsResult> {
    return this.rpc.request(Methods.SessionEvents, { sessionId, fromSeq, limit });
  }

  compact(sessionId: string): Promise<SessionCompactResult> {
    return this.rpc.request(Methods.SessionCompact, { sessionId });
  }

  respondApproval(sessionId: string, approvalId: string, decision: ApprovalChoice): Promise<ApprovalRespondResult> {
    return this.rpc.request(Methods.ApprovalRespond, { sessionId, approvalId, decision });
  }

  status(): Promise<DaemonStatusResult> {
    return this.rpc.request(Methods.DaemonStatus, {});
  }

  shutdown(): Promise<DaemonShutdownResult> {
    return this.rpc.request(Methods.DaemonShutdown, {});
  }

  private onEvent(n: EventNotification): void {
    const id = String(n.subscription);
    const listener = this.listeners.get(id);
    if (listener) {
      listener(n.result);
    } else {
      const list = this.early.get(id) ?? [];
      list.push(n.result);
      this.early.set(id, list);
    }
  }
}

/** Words for an error from any method, with the daemon's own text (it says how to fix it). */
export function describeError(e: unknown): string {
  if (e instanceof RpcError) {
    const name = Object.entries(ErrorCodes).find(([, c]) => c === e.code)?.[0];
    return name ? `${e.message} (${name})` : e.message;
  }
  return e instanceof Error ? e.message : String(e);
}

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
