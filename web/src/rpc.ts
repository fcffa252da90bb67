// The page's one connection: JSON-RPC 2.0 over the daemon's WebSocket (one message, one
// request, answer or event), authorized by the session cookie the login set and the tab secret
// (`login.ts`). When the connection drops (the daemon restarted), it reconnects with a growing
// pause and tells its listeners, who subscribe again from the last seq they saw; when the
// daemon refuses this tab's login, it says so and stops.

import { Methods, PROTOCOL_VERSION, type InitializeResult } from "../../editors/vscode/src/protocol.generated";
import { SECRET_HEADER, secretProtocol, tabSecret } from "./login";

/** An error answer, or the connection lost while waiting. */
export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = "RpcError";
  }
}

/** Locally: the connection closed with the request unanswered. */
export const CONNECTION_LOST = -32099;

type Pending = { resolve: (value: unknown) => void; reject: (error: Error) => void };

/** `refused`: the daemon answers, but not to this tab's login (no secret, or an old one). */
export type ConnectionState = "connecting" | "open" | "closed" | "refused";

export class Rpc {
  private socket: WebSocket | undefined;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly notifications = new Map<string, Set<(params: unknown) => void>>();
  private readonly stateListeners = new Set<(state: ConnectionState, reconnected: boolean) => void>();
  private ready: Promise<void> | undefined;
  private pause = 250;
  private opened = false;
  state: ConnectionState = "connecting";

  constructor(private readonly url: string) {}

  /** Opens the connection (again); resolves once `initialize` is answered. */
  connect(): Promise<void> {
    if (this.ready) {
      return this.ready;
    }
    const secret = tabSecret();
    if (!secret) {
      this.setState("refused", false);
      return Promise.reject(new RpcError(CONNECTION_LOST, "this tab has no dsh login"));
    }
    this.setState("connecting", false);
    this.ready = new Promise<void>((resolve, reject) => {
      const socket = new WebSocket(this.url, [secretProtocol(secret)]);
      this.socket = socket;
      socket.onmessage = (message) => this.receive(String(message.data));
      socket.onclose = () => {
        const wasOpen = this.socket === socket && this.state === "open";
        if (wasOpen) {
          this.lost(socket);
          return;
        }
        reject(new RpcError(CONNECTION_LOST, "cannot reach the dsh daemon"));
        // A WebSocket refused does not say why: a POST with the same login does.
        void refused(secret).then((refused) => this.lost(socket, refused));
      };
      socket.onopen = () => {
        this.call<InitializeResult>(Methods.Initialize, {
          clientInfo: { name: "dsh-web" },
          protocolVersion: PROTOCOL_VERSION,
        }).then(() => {
          const reconnected = this.opened;
          this.opened = true;
          this.pause = 250;
          this.setState("open", reconnected);
          resolve();
        }, reject);
      };
    });
    this.ready.catch(() => undefined);
    return this.ready;
  }

  /** Calls `listener` whenever the connection opens or closes; `reconnected` when it opened
   * again after it was lost. */
  onState(listener: (state: ConnectionState, reconnected: boolean) => void): () => void {
    this.stateListeners.add(listener);
    return () => this.stateListeners.delete(listener);
  }

  /** Calls `handler` for each notification named `method`. */
  onNotification(method: string, handler: (params: unknown) => void): () => void {
    let set = this.notifications.get(method);
    if (!set) {
      set = new Set();
      this.notifications.set(method, set);
    }
    set.add(handler);
    return () => set.delete(handler);
  }

  /** A request on the open connection (waiting for it to open). */
  async request<R>(method: string, params?: unknown): Promise<R> {
    await this.connect();
    return this.call<R>(method, params);
  }

  private call<R>(method: string, params?: unknown): Promise<R> {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      return Promise.reject(new RpcError(CONNECTION_LOST, `${method}: not connected`));
    }
    const id = this.nextId++;
    const message: Record<string, unknown> = { jsonrpc: "2.0", id, method };
    if (params !== undefined) {
      message.params = params;
    }
    return new Promise<R>((resolve, reject) => {
      this.pending.set(id, { resolve: (value) => resolve(value as R), reject });
      socket.send(JSON.stringify(message));
    });
  }

  private receive(text: string): void {
    let message: { id?: number; result?: unknown; error?: { code: number; message: string }; method?: string; params?: unknown };
    try {
      message = JSON.parse(text);
    } catch {
      return;
    }
    if (typeof message.id === "number") {
      const pending = this.pending.get(message.id);
      this.pending.delete(message.id);
      if (message.error) {
        pending?.reject(new RpcError(message.error.code, message.error.message));
      } else {
        pending?.resolve(message.result);
      }
      return;
    }
    if (message.method) {
      for (const handler of this.notifications.get(message.method) ?? []) {
        handler(message.params);
      }
    }
  }

  /** The connection ended: again after a pause, unless the daemon `refused` this tab. */
  private lost(socket: WebSocket, refused = false): void {
    if (this.socket !== socket) {
      return;
    }
    this.socket = undefined;
    this.ready = undefined;
    for (const pending of this.pending.values()) {
      pending.reject(new RpcError(CONNECTION_LOST, "the connection to the dsh daemon was lost"));
    }
    this.pending.clear();
    if (refused) {
      this.setState("refused", false);
      return;
    }
    this.setState("closed", false);
    const pause = this.pause;
    this.pause = Math.min(this.pause * 2, 4000);
    setTimeout(() => void this.connect().catch(() => undefined), pause);
  }

  private setState(state: ConnectionState, reconnected: boolean): void {
    this.state = state;
    for (const listener of this.stateListeners) {
      listener(state, reconnected);
    }
  }
}

/** Whether the daemon answers a `POST` with this tab's login as not logged in (401 or 403);
 * false when it cannot be reached (it is restarting). */
async function refused(secret: string): Promise<boolean> {
  try {
    const response = await fetch("/", {
      method: "POST",
      headers: { "content-type": "application/json", [SECRET_HEADER]: secret },
      body: JSON.stringify({ jsonrpc: "2.0", id: 0, method: Methods.DaemonStatus, params: {} }),
    });
    return response.status === 401 || response.status === 403;
  } catch {
    return false;
  }
}

/** The daemon's WebSocket: the page's own origin. */
export function socketUrl(): string {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/`;
}
