// The transcript of one session, folded from its log events as the daemon delivers them
// (`session/subscribe` from seq 0: stored events, then live ones). Usage rows and cache-drop
// explanations come from `session/usage`; this module only joins them to the steps. No `vscode`.

import type {
  ApprovalChoice,
  ApprovalVerdict,
  ChangeKind,
  ContextMessage,
  Cost,
  ForkOrigin,
  ImageRef,
  LlmRetry,
  PlanUpdate,
  PriceUsed,
  RequestSent,
  SessionEvent,
  SessionMeta,
  SessionUsageResult,
  StopReason,
  TaskSpawn,
  TurnLimit,
  Usage,
  UsageEntry,
} from "./protocol.generated";
import { checkpointText, rewindText } from "./checkpointText";
import { hookText } from "./hookText";
import { toolDisplayName, type McpWait } from "./mcp";

export type ApprovalView = {
  approvalId: string;
  callId: string;
  tool: string;
  summary: string;
  /** For a command: how it would run (its sandbox policy, or that it runs unconfined). */
  sandbox?: string;
  seq: number;
  decision?: ApprovalVerdict;
  decisionSeq?: number;
};

export type ToolCallView = {
  index: number;
  id: string;
  name: string;
  /** The argument string as streamed (or as in the final message). */
  args: string;
  /** Set by `tool/call`: the tool started. */
  started: boolean;
  /** Set by `tool/call`: a command ran without the sandbox (approved so, policy `full`, or none). */
  unconfined?: boolean;
  progress: string[];
  /** `images`: what the result shows the model after its text (a `read_file` of an image). */
  result?: { content: string; isError: boolean; seq: number; images: ImageRef[] };
  approval?: ApprovalView;
};

export type HeaderChange = {
  seq: number;
  /** `snapshot` for `request/header`; else what a `request/header-delta` changed. */
  kind: "snapshot" | "delta";
  what: string;
};

export type StepState = "running" | "done" | "error" | "cancelled" | "interrupted";

export type StepView = {
  step: number;
  turn: number;
  /** Seq of the step's `step/start`: fork here to redo this request. */
  seq: number;
  state: StepState;
  reasoning: string;
  text: string;
  toolCalls: ToolCallView[];
  headerChanges: HeaderChange[];
  sent?: RequestSent;
  retries: LlmRetry[];
  finishReason?: string;
  usage?: Usage;
  error?: string;
  /** Steering messages (their seqs) that joined this step's request. */
  steering: number[];
  /** Workspace notes (their seqs) that joined this step's request. */
  notes: number[];
  /** The `session/usage` row, once fetched. */
  row?: UsageEntry;
  /** The sub-agent sessions this step's `task` calls started (`task/spawn`), in log order. */
  children: TaskSpawn[];
};

export type Entry =
  | { kind: "turn"; seq: number; turn: number }
  /** A prompt; `images` are the ones given with it (`attachments`), by reference. */
  | { kind: "user"; seq: number; text: string; images: ImageRef[] }
  /** A note the harness added (`context/message`). `headline` is the one line a workspace note
   * shows (its `text`, what the model reads, folds under it); absent for notes shown whole
   * (today's date). `landedStep`: the step whose request it joined. */
  | { kind: "context"; seq: number; text: string; source?: string; headline?: string; landedStep?: number }
  | { kind: "steering"; seq: number; text: string; landedStep?: number }
  | { kind: "step"; step: StepView }
  | { kind: "compact"; seq: number; reason: string; tokensBefore: number; summary?: string; replaced?: { start: number; end: number; seq: number } }
  | { kind: "turnEnd"; seq: number; turn: number; reason: StopReason; error?: string }
  /** A budget of the turn was reached (`turn/limit`): the turn stops. */
  | { kind: "limit"; seq: number; limit: TurnLimit }
  | { kind: "approval"; approval: ApprovalView }
  /** A step waited for MCP servers to start or re-list their tools (`mcp/wait`). */
  | { kind: "mcpWait"; seq: number; wait: McpWait }
  | { kind: "notice"; seq: number; text: string }
  /** A `task` call's sub-agent: a session of its own, opened from its line. */
  | { kind: "child"; seq: number; step?: number; spawn: TaskSpawn };

export type TurnView = {
  turn: number;
  seq: number;
  prompt?: string;
  steps: StepView[];
  end?: { reason: StopReason; error?: string };
};

/** What an applied event changed, so views can redraw only that. */
export type Change = { kind: "none" } | { kind: "step"; step: number } | { kind: "structure" };

const ZERO: Usage = { promptTokens: 0, cacheHitTokens: 0, cacheMissTokens: 0, completionTokens: 0, reasoningTokens: 0 };

export function addUsage(a: Usage, b: Usage): Usage {
  return {
    promptTokens: a.promptTokens + b.promptTokens,
    cacheHitTokens: a.cacheHitTokens + b.cacheHitTokens,
    cacheMissTokens: a.cacheMissTokens + b.cacheMissTokens,
    completionTokens: a.completionTokens + b.completionTokens,
    reasoningTokens: a.reasoningTokens + b.reasoningTokens,
  };
}

export class Transcript {
  readonly entries: Entry[] = [];
  readonly turns: TurnView[] = [];
  readonly steps = new Map<number, StepView>();
  /** Approvals not answered yet, by id. */
  readonly pendingApprovals = new Map<string, ApprovalView>();
  meta?: SessionMeta;
  /** Seq of the last event applied (-1: none). */
  lastSeq = -1;
  /** Seqs that were skipped (should stay empty: the daemon promises no gap). */
  readonly gaps: Array<{ expected: number; got: number }> = [];
  running = false;
  /** Totals from the last `session/usage` (the daemon's sums, for checking). */
  usageTotals?: Usage;
  /** The session's cost from the last `session/usage` (absent: a step without a known price). */
  cost?: Cost;
  /** The prices that cost was computed from, one per profile and model the session ran on. */
  prices: PriceUsed[] = [];
  /** The current plan: the last `plan/update` (each replaces the plan whole), and its seq. */
  plan?: { seq: number; update: PlanUpdate };
  private readonly calls = new Map<string, { step: StepView; call: ToolCallView }>();
  private readonly approvals = new Map<string, ApprovalView>();
  /** Steering and notes not yet joined to a request, by seq. */
  private readonly joinable = new Map<number, Extract<Entry, { kind: "steering" | "context" }>>();
  private currentTurn?: TurnView;

  constructor(readonly sessionId: string) {}

  get forkedFrom(): ForkOrigin | undefined {
    return this.meta?.forkedFrom;
  }

  /** The first prompt, on one line. */
  get title(): string | undefined {
    const first = this.turns.find((t) => t.prompt !== undefined)?.prompt;
    return first?.replace(/\s+/g, " ").trim();
  }

  /** The step that runs now, or the last one. */
  get lastStep(): StepView | undefined {
    let last: StepView | undefined;
    for (const s of this.steps.values()) {
      if (!last || s.step > last.step) {
        last = s;
      }
    }
    return last;
  }

  /** The session's cost, when the last `session/usage` covered every finished step (a step
   * that ended since shows no cost until the next answer, rather than a stale sum). */
  get sessionCost(): Cost | undefined {
    const t = this.totals;
    const u = this.usageTotals;
    const fresh = u !== undefined && u.promptTokens === t.promptTokens && u.cacheHitTokens === t.cacheHitTokens && u.completionTokens === t.completionTokens;
    return fresh ? this.cost : undefined;
  }

  /** Sum of the usage of finished steps (what `session/usage` calls `totals`). */
  get totals(): Usage {
    let t = ZERO;
    for (const s of this.steps.values()) {
      if (s.usage) {
        t = addUsage(t, s.usage);
      }
    }
    return t;
  }

  /** Every image the transcript shows (prompts' and tool results'), in log order. */
  get images(): ImageRef[] {
    const out: ImageRef[] = [];
    for (const e of this.entries) {
      if (e.kind === "user") {
        out.push(...e.images);
      } else if (e.kind === "step") {
        for (const c of e.step.toolCalls) {
          out.push(...(c?.result?.images ?? []));
        }
      }
    }
    return out;
  }

  /** Applies events in order; returns whether any changed the view structurally. */
  applyAll(events: SessionEvent[]): Change {
    let structural = false;
    let last: Change = { kind: "none" };
    for (const e of events) {
      const c = this.apply(e);
      if (c.kind === "structure") {
        structural = true;
      }
      if (c.kind !== "none") {
        last = c;
      }
    }
    return structural ? { kind: "structure" } : last;
  }

  /** Applies one event. Events at or below `lastSeq` are duplicates and are ignored. */
  apply(e: SessionEvent): Change {
    if (e.seq <= this.lastSeq) {
      return { kind: "none" };
    }
    if (e.seq !== this.lastSeq + 1) {
      this.gaps.push({ expected: this.lastSeq + 1, got: e.seq });
    }
    this.lastSeq = e.seq;
    switch (e.type) {
      case "session/meta":
        this.meta = e.data;
        return { kind: "structure" };
      case "turn/start": {
        const { turn } = e.data;
        this.currentTurn = { turn, seq: e.seq, steps: [] };
        this.turns.push(this.currentTurn);
        this.entries.push({ kind: "turn", seq: e.seq, turn });
        this.running = true;
        return { kind: "structure" };
      }
      case "user/message": {
        const { text, command, images } = e.data;
        if (this.currentTurn && this.currentTurn.prompt === undefined) {
          this.currentTurn.prompt = command ? `/${command.name}` : text;
        }
        // A prompt command's expansion names the command and its file first.
        const shown = command ? `/${command.name} (${command.source}):\n${text}` : text;
        this.entries.push({ kind: "user", seq: e.seq, text: shown, images: images ?? [] });
        return { kind: "structure" };
      }
      case "context/message": {
        const c = e.data;
        const entry: Extract<Entry, { kind: "context" }> = { kind: "context", seq: e.seq, text: c.text, source: c.source, headline: noteHeadline(c) };
        this.entries.push(entry);
        this.joinable.set(e.seq, entry);
        return { kind: "structure" };
      }
      case "steering/message": {
        const entry: Extract<Entry, { kind: "steering" }> = { kind: "steering", seq: e.seq, text: e.data.text };
        this.entries.push(entry);
        this.joinable.set(e.seq, entry);
        return { kind: "structure" };
      }
      case "step/start": {
        const s = e.data;
        const step: StepView = {
          step: s.step,
          turn: s.turn,
          seq: e.seq,
          state: "running",
          reasoning: "",
          text: "",
          toolCalls: [],
          headerChanges: [],
          retries: [],
          steering: [],
          notes: [],
          children: [],
        };
        // The steering and notes that joined this request, as the daemon says (`joined`).
        for (const seq of e.joined ?? []) {
          const m = this.joinable.get(seq);
          if (!m) {
            continue;
          }
          this.joinable.delete(seq);
          m.landedStep = s.step;
          if (m.kind === "steering") {
            step.steering.push(m.seq);
          } else if (m.headline !== undefined) {
            step.notes.push(m.seq);
          }
        }
        // A step left running by an earlier process (crash, restart) never ended.
        for (const other of this.steps.values()) {
          if (other.state === "running") {
            other.state = "interrupted";
          }
        }
        this.steps.set(s.step, step);
        const turn = this.turnFor(s.turn, e.seq);
        turn.steps.push(step);
        this.entries.push({ kind: "step", step });
        return { kind: "structure" };
      }
      case "request/header": {
        const h = e.data;
        const step = this.lastStep;
        step?.headerChanges.push({ seq: e.seq, kind: "snapshot", what: `header snapshot (${h.reason})` });
        return step ? { kind: "step", step: step.step } : { kind: "none" };
      }
      case "request/header-delta": {
        const h = e.data;
        const what = [h.system ? "system prompt" : "", h.tools ? "tools" : "", h.config ? "config" : ""].filter(Boolean).join(", ");
        const step = this.lastStep;
        step?.headerChanges.push({ seq: e.seq, kind: "delta", what: `${what || "header"} changed` });
        return step ? { kind: "step", step: step.step } : { kind: "none" };
      }
      case "request/sent": {
        const step = this.lastStep;
        if (step) {
          step.sent = e.data;
          return { kind: "step", step: step.step };
        }
        return { kind: "none" };
      }
      case "assistant/chunk": {
        const c = e.data;
        const step = this.steps.get(c.step);
        if (!step) {
          return { kind: "none" };
        }
        const delta = c.delta;
        switch (delta.kind) {
          case "text":
            step.text += delta.text;
            break;
          case "reasoning":
            step.reasoning += delta.text;
            break;
          case "toolCall":
            step.toolCalls[delta.index] = { index: delta.index, id: delta.id, name: delta.name, args: "", started: false, progress: [] };
            this.calls.set(delta.id, { step, call: step.toolCalls[delta.index] });
            break;
          case "toolArgs": {
            const call = step.toolCalls[delta.index];
            if (call) {
              call.args += delta.fragment;
            }
            break;
          }
        }
        return { kind: "step", step: step.step };
      }
      case "assistant/message": {
        const m = e.data;
        const step = this.steps.get(m.step);
        if (!step) {
          return { kind: "none" };
        }
        // The assembled message is authoritative over the streamed pieces.
        step.text = m.message.content;
        step.reasoning = m.message.reasoningContent ?? "";
        // `toolCalls` is left out of the log when empty (the generated type says otherwise).
        (m.message.toolCalls ?? []).forEach((tc, index) => {
          const existing = step.toolCalls[index];
          const call: ToolCallView = existing ?? { index, id: tc.id, name: tc.name, args: "", started: false, progress: [] };
          call.id = tc.id;
          call.name = tc.name;
          call.args = tc.arguments;
          step.toolCalls[index] = call;
          this.calls.set(tc.id, { step, call });
        });
        return { kind: "step", step: step.step };
      }
      case "tool/call": {
        const t = e.data;
        const found = this.calls.get(t.callId);
        if (found) {
          found.call.started = true;
          found.call.unconfined = t.unconfined ?? false;
          return { kind: "step", step: found.step.step };
        }
        const step = this.steps.get(t.step);
        if (step) {
          const call: ToolCallView = { index: step.toolCalls.length, id: t.callId, name: t.name, args: "", started: true, unconfined: t.unconfined ?? false, progress: [] };
          step.toolCalls.push(call);
          this.calls.set(t.callId, { step, call });
          return { kind: "step", step: step.step };
        }
        return { kind: "none" };
      }
      case "tool/progress": {
        const p = e.data;
        const found = this.calls.get(p.callId);
        if (found) {
          found.call.progress.push(p.text);
          return { kind: "step", step: found.step.step };
        }
        return { kind: "none" };
      }
      case "tool/result": {
        const r = e.data;
        const found = this.calls.get(r.callId);
        if (found) {
          found.call.result = { content: r.content, isError: r.isError ?? false, seq: e.seq, images: r.images ?? [] };
          return { kind: "step", step: found.step.step };
        }
        return { kind: "none" };
      }
      case "approval/request": {
        const a = e.data;
        const view: ApprovalView = { ...a, seq: e.seq };
        this.approvals.set(a.approvalId, view);
        this.pendingApprovals.set(a.approvalId, view);
        const found = this.calls.get(a.callId);
        if (found) {
          found.call.approval = view;
          return { kind: "step", step: found.step.step };
        }
        this.entries.push({ kind: "approval", approval: view });
        return { kind: "structure" };
      }
      case "approval/decision": {
        const { approvalId, decision } = e.data;
        this.pendingApprovals.delete(approvalId);
        const view = this.approvals.get(approvalId);
        if (view) {
          view.decision = decision;
          view.decisionSeq = e.seq;
          const found = this.calls.get(view.callId);
          return found ? { kind: "step", step: found.step.step } : { kind: "structure" };
        }
        return { kind: "none" };
      }
      case "step/end": {
        const s = e.data;
        const step = this.steps.get(s.step);
        if (!step) {
          return { kind: "none" };
        }
        step.state = "done";
        step.finishReason = s.finishReason;
        step.usage = s.usage;
        return { kind: "step", step: step.step };
      }
      case "step/error": {
        const s = e.data;
        const step = this.steps.get(s.step);
        if (!step) {
          return { kind: "none" };
        }
        step.state = s.cancelled ? "cancelled" : "error";
        step.error = s.error;
        return { kind: "step", step: step.step };
      }
      case "llm/retry": {
        const r = e.data;
        const step = this.steps.get(r.step);
        step?.retries.push(r);
        return step ? { kind: "step", step: step.step } : { kind: "none" };
      }
      case "turn/end": {
        const t = e.data;
        const turn = this.turnFor(t.turn, e.seq);
        turn.end = { reason: t.reason, error: t.error };
        this.entries.push({ kind: "turnEnd", seq: e.seq, turn: t.turn, reason: t.reason, error: t.error });
        this.running = false;
        for (const s of turn.steps) {
          if (s.state === "running") {
            s.state = t.reason === "cancelled" ? "cancelled" : "interrupted";
          }
        }
        // Approvals of an ended turn wait for nothing.
        for (const [id, a] of this.pendingApprovals) {
          const found = this.calls.get(a.callId);
          if (!found || found.step.turn === t.turn) {
            this.pendingApprovals.delete(id);
          }
        }
        return { kind: "structure" };
      }
      case "turn/limit":
        // Logged between steps, right before the turn's end (reason `limit`).
        this.entries.push({ kind: "limit", seq: e.seq, limit: e.data });
        return { kind: "structure" };
      case "compact/start": {
        const c = e.data;
        this.entries.push({ kind: "compact", seq: e.seq, reason: c.reason, tokensBefore: c.tokensBefore });
        return { kind: "structure" };
      }
      case "compact/summary": {
        const c = e.data;
        const entry = this.lastCompact();
        if (entry) {
          entry.summary = c.summary;
        } else {
          this.entries.push({ kind: "compact", seq: e.seq, reason: "summary", tokensBefore: 0, summary: c.summary });
        }
        return { kind: "structure" };
      }
      case "surface/replace": {
        const r = e.data;
        const entry = this.lastCompact();
        if (entry && entry.replaced === undefined) {
          entry.replaced = { start: r.start, end: r.end, seq: e.seq };
        } else {
          this.entries.push({
            kind: "notice",
            seq: e.seq,
            text: `seqs ${r.start}–${r.end} replaced by a ${r.node.type === "summary" ? "summary" : "shortened tool result"} (seq ${e.seq})`,
          });
        }
        return { kind: "structure" };
      }
      case "plan/update":
        // The model's update_plan replaced its plan: pinned in the header, not an entry.
        this.plan = { seq: e.seq, update: e.data };
        return { kind: "structure" };
      case "mcp/wait":
        // Logged before the step whose tools it waited for: the step/start after it ends it.
        this.entries.push({ kind: "mcpWait", seq: e.seq, wait: e.data });
        return { kind: "structure" };
      case "workspace/checkpoint":
        this.entries.push({ kind: "notice", seq: e.seq, text: checkpointText(e.data) });
        return { kind: "structure" };
      case "workspace/rewind":
        this.entries.push({ kind: "notice", seq: e.seq, text: rewindText(e.data) });
        return { kind: "structure" };
      case "hook/run":
        this.entries.push({ kind: "notice", seq: e.seq, text: hookText(e.data) });
        return { kind: "structure" };
      case "task/spawn": {
        // A `task` call's sub-agent, a session of its own (docs/subagents.md): named under the
        // step that spawned it; its answer is the call's result.
        const step = this.calls.get(e.data.callId)?.step;
        step?.children.push(e.data);
        this.entries.push({ kind: "child", seq: e.seq, step: step?.step, spawn: e.data });
        return { kind: "structure" };
      }
      default:
        return { kind: "none" };
    }
  }

  /** Joins `session/usage` rows (with their cause explanations) to the steps. */
  applyUsage(u: SessionUsageResult): void {
    for (const row of u.rows) {
      const step = this.steps.get(row.step);
      if (step) {
        step.row = row;
      }
    }
    this.usageTotals = u.totals;
    this.cost = u.cost;
    this.prices = u.prices;
  }

  private turnFor(turn: number, seq: number): TurnView {
    let t = this.turns.find((x) => x.turn === turn);
    if (!t) {
      t = { turn, seq, steps: [] };
      this.turns.push(t);
    }
    return t;
  }

  private lastCompact(): Extract<Entry, { kind: "compact" }> | undefined {
    for (let i = this.entries.length - 1; i >= 0; i--) {
      const e = this.entries[i];
      if (e.kind === "compact") {
        return e;
      }
      if (e.kind === "step" || e.kind === "turn") {
        return undefined;
      }
    }
    return undefined;
  }
}

/** How a note names what happened to a file (`files[].change`). */
const CHANGE_WORDS: Record<ChangeKind, string> = { edited: "changed", added: "added", deleted: "deleted", replaced: "replaced" };

/**
 * The one line the transcript shows for a workspace note: for an `instructions` note
 * "AGENTS.md changed: joins the next request as a note", for a `workspace` note
 * "src/a.rs changed on disk: joins the next request as a note" — the files' paths grouped by
 * what happened to them, in the note's order. Undefined for the notes shown whole: the date,
 * and any source this client does not know.
 */
export function noteHeadline(c: Pick<ContextMessage, "source" | "files">): string | undefined {
  if (c.source !== "instructions" && c.source !== "workspace") {
    return undefined;
  }
  const where = c.source === "workspace" ? " on disk" : "";
  const groups = new Map<ChangeKind, string[]>();
  for (const f of c.files ?? []) {
    const paths = groups.get(f.change) ?? [];
    paths.push(f.path);
    groups.set(f.change, paths);
  }
  const what = [...groups].map(([change, paths]) => `${paths.join(", ")} ${CHANGE_WORDS[change] ?? change}${where}`).join("; ");
  const fallback = c.source === "workspace" ? "a file changed on disk" : "the instructions changed";
  return `${what || fallback}: joins the next request as a note`;
}

/** The text of the native approval prompt: the tool (an MCP tool with its server), what it
 * would do, and for a command how it would run. */
export function approvalPrompt(a: { tool: string; summary: string; sandbox?: string }): string {
  const sandbox = a.sandbox ? ` [sandbox: ${a.sandbox}]` : "";
  return `dsh wants to run ${toolDisplayName(a.tool)}: ${a.summary}${sandbox}`;
}

/** The answers an approval offers: a command that would run confined can also be allowed
 * once without the sandbox. */
export function approvalChoices(a: { sandbox?: string }): { label: string; choice: ApprovalChoice }[] {
  const choices: { label: string; choice: ApprovalChoice }[] = [
    { label: "Allow", choice: "allow" },
    { label: "Deny", choice: "deny" },
    { label: "Allow always", choice: "allowAlways" },
  ];
  if (a.sandbox && !a.sandbox.includes("unconfined")) {
    choices.push({ label: "Allow once, unconfined", choice: "allowUnconfined" });
  }
  return choices;
}
