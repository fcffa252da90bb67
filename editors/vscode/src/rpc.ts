// A small JSON-RPC 2.0 client over newline-delimited JSON (one message per line), the framing
// `dsh stdio` speaks. No `vscode` import: it runs in node and in the extension host alike.

import type { Readable, Writable } from "node:stream";

/** An error answer from the daemon (a JSON-RPC error object), or a transport failure. */
export class RpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
    readonly method?: string,
  ) {
    super(message);
    this.name = "RpcError";
  }
}

/** Code used locally when the connection closes with requests still waiting. */
export const CONNECTION_CLOSED = -32099;

/** Code used locally for a request this client does not send (JSON-RPC's "invalid request"). */
export const REQUEST_TOO_LONG = -32600;

/** The longest line the daemon reads (protocol/README.md: at most 4 MiB per line). A longer one
 * is answered with an error that names no request, so its caller would wait forever. */
export const MAX_LINE_BYTES = 4 * 1024 * 1024;

type Pending = {
  method: string;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
};

export type NotificationHandler = (params: unknown) => void;

/** A JSON-RPC client on a pair of streams. */
export class RpcClient {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly handlers = new Map<string, Set<NotificationHandler>>();
  private readonly closeHandlers = new Set<(error?: Error) => void>();
  private buffer = "";
  private closed: Error | undefined;

  constructor(
    input: Readable,
    private readonly output: Writable,
    private readonly trace?: (line: string) => void,
  ) {
    input.setEncoding("utf8");
    input.on("data", (chunk: string) => this.receive(chunk));
    input.on("end", () => this.close(new RpcError(CONNECTION_CLOSED, "the daemon closed the connection")));
    input.on("error", (e: Error) => this.close(e));
    output.on("error", (e: Error) => this.close(e));
  }

  /** Whether the connection is closed; the reason when it is. */
  get closedReason(): Error | undefined {
    return this.closed;
  }

  /** Sends a request and waits for its answer. */
  request<R>(method: string, params?: unknown): Promise<R> {
    if (this.closed) {
      return Promise.reject(new RpcError(CONNECTION_CLOSED, `${method}: ${this.closed.message}`, undefined, method));
    }
    const id = this.nextId++;
    const message: Record<string, unknown> = { jsonrpc: "2.0", id, method };
    if (params !== undefined) {
      message.params = params;
    }
    const line = JSON.stringify(message);
    const bytes = Buffer.byteLength(line);
    if (bytes > MAX_LINE_BYTES) {
      const size = (n: number) => n.toLocaleString("en-US");
      return Promise.reject(new RpcError(REQUEST_TOO_LONG, `${method}: the request is ${size(bytes)} bytes; the daemon reads requests of at most ${size(MAX_LINE_BYTES)} bytes (4 MiB)`, undefined, method));
    }
    return new Promise<R>((resolve, reject) => {
      this.pending.set(id, { method, resolve: resolve as (v: unknown) => void, reject });
      this.write(line);
    });
  }

  /** Sends a notification (no answer). */
  notify(method: string, params?: unknown): void {
    this.send(params === undefined ? { jsonrpc: "2.0", method } : { jsonrpc: "2.0", method, params });
  }

  /** Calls `handler` for every notification named `method`; returns the unsubscriber. */
  onNotification(method: string, handler: NotificationHandler): () => void {
    let set = this.handlers.get(method);
    if (!set) {
      set = new Set();
      this.handlers.set(method, set);
    }
    set.add(handler);
    return () => set.delete(handler);
  }

  /** Calls `handler` once when the connection closes. */
  onClose(handler: (error?: Error) => void): () => void {
    if (this.closed) {
      queueMicrotask(() => handler(this.closed));
    } else {
      this.closeHandlers.add(handler);
    }
    return () => this.closeHandlers.delete(handler);
  }

  /** Fails every waiting request and stops reading. Idempotent. */
  close(reason: Error = new RpcError(CONNECTION_CLOSED, "connection closed")): void {
    if (this.closed) {
      return;
    }
    this.closed = reason;
    for (const [, p] of this.pending) {
      p.reject(new RpcError(CONNECTION_CLOSED, `${p.method}: ${reason.message}`, undefined, p.method));
    }
    this.pending.clear();
    for (const h of this.closeHandlers) {
      h(reason);
    }
    this.closeHandlers.clear();
  }

  private send(message: unknown): void {
    this.write(JSON.stringify(message));
  }

  private write(line: string): void {
    this.trace?.(`→ ${line.length > 2000 ? line.slice(0, 2000) + "…" : line}`);
    this.output.write(line + "\n");
  }

  private receive(chunk: string): void {
    this.buffer += chunk;
    let newline: number;
    while ((newline = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, newline).trim();
      this.buffer = this.buffer.slice(newline + 1);
      if (line.length > 0) {
        this.dispatch(line);
      }
    }
  }

  private dispatch(line: string): void {
    this.trace?.(`← ${line.length > 2000 ? line.slice(0, 2000) + "…" : line}`);
    let message: {
      id?: number | string | null;
      method?: string;
      params?: unknown;
      result?: unknown;
      error?: { code: number; message: string; data?: unknown };
    };
    try {
      message = JSON.parse(line);
    } catch {
      this.trace?.(`! not JSON: ${line.slice(0, 200)}`);
      return;
    }
    if (message.method !== undefined) {
      if (message.id !== undefined && message.id !== null) {
        // A request from the daemon: this client serves none.
        this.send({ jsonrpc: "2.0", id: message.id, error: { code: -32601, message: `method not found: ${message.method}` } });
        return;
      }
      for (const h of this.handlers.get(message.method) ?? []) {
        try {
          h(message.params);
        } catch (e) {
          this.trace?.(`! handler for ${message.method} threw: ${String(e)}`);
        }
      }
      return;
    }
    if (typeof message.id !== "number") {
      return;
    }
    const p = this.pending.get(message.id);
    if (!p) {
      return;
    }
    this.pending.delete(message.id);
    if (message.error) {
      p.reject(new RpcError(message.error.code, message.error.message, message.error.data, p.method));
    } else {
      p.resolve(message.result);
    }
  }
}
