// The transcript as HTML for the transcript webview: one block per entry, each step with its
// usage badge colored by hit ratio and the cache-drop cause named from the log. No `vscode`.
// Buttons carry `data-action` and `data-step`; the webview script posts them to the extension.

import { imageCaption, type ImageLookup } from "./images";
import { mcpLabel, mcpTool, mcpWaitText } from "./mcp";
import type { Entry, StepView, ToolCallView, Transcript } from "./transcript";
import { dropExplanation, formatMoney, formatTokens, hitClass, hitPercent, usageParts } from "./usage";
import type { ImageRef, PlanStatus, PlanUpdate, TurnLimit } from "./protocol.generated";

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

/** Every image loading, for a view that fetches none. */
const NO_IMAGES: ImageLookup = () => ({ kind: "loading" });

/** The body of the transcript view (everything inside `<main>`); `images` says which of its
 * images are here (their bytes go to the page apart, once: `<img data-sha256>` is filled there). */
export function renderTranscript(t: Transcript, images: ImageLookup = NO_IMAGES): string {
  const parts: string[] = [];
  parts.push(renderHeader(t));
  for (const e of t.entries) {
    parts.push(renderEntry(t, e, images));
  }
  if (t.entries.length === 0) {
    parts.push(`<div class="empty">No turn yet. Run <b>dsh: Prompt</b> to start.</div>`);
  }
  return parts.join("\n");
}

function renderHeader(t: Transcript): string {
  const fork = t.forkedFrom
    ? `<span class="fork">forked from ${escapeHtml(t.forkedFrom.sessionId)} before seq ${t.forkedFrom.seq}</span>`
    : "";
  const totals = t.totals;
  const state = t.running ? `<span class="running">● running</span>` : "";
  const cost = t.sessionCost;
  // What the cache saved and the prices behind the figures, as `dsh usage` names them.
  const money = cost
    ? `<div class="money" data-money>the cache saved <b data-saved>${escapeHtml(formatMoney(cost.saved, cost.currency))}</b>` +
      t.prices.map((p) => ` · <span class="prices" title="per million tokens: cache hit ${escapeHtml(formatMoney(p.price.cacheHit, p.price.currency))}, cache miss ${escapeHtml(formatMoney(p.price.cacheMiss, p.price.currency))}, output ${escapeHtml(formatMoney(p.price.output, p.price.currency))}">${escapeHtml(`${p.profile}/${p.model}`)} prices (${escapeHtml(p.price.currency)})</span>`).join("") +
      `</div>`
    : "";
  return (
    `<header class="session" data-session="${escapeHtml(t.sessionId)}">` +
    `<div class="title">${escapeHtml(t.title ?? "New session")}</div>` +
    `<div class="meta"><code>${escapeHtml(t.sessionId)}</code> ${fork} ${state}</div>` +
    `<div class="totals usage ${hitClass(totals.promptTokens ? totals : undefined)}" data-totals>` +
    `Σ ${usageBadgeInner(totals, hitPercent(totals), cost)}</div>` +
    money +
    renderPlan(t.plan) +
    `</header>`
  );
}

/** Each status's mark and words (`dsh prompt` prints `[x]`, `[>]`, `[ ]`). */
const PLAN_MARKS: Record<PlanStatus, { mark: string; words: string }> = {
  completed: { mark: "✓", words: "completed" },
  in_progress: { mark: "▶", words: "in progress" },
  pending: { mark: "○", words: "pending" },
};

/** The count line of a plan, as `dsh prompt` says it: "1 of 3 completed". */
export function planSummary(update: PlanUpdate): string {
  const done = update.plan.filter((e) => e.status === "completed").length;
  return update.plan.length === 0 ? "cleared" : `${done} of ${update.plan.length} completed`;
}

/** The current plan, pinned in the header above the transcript: its count, the model's
 * explanation, and each step with its status. Nothing before the model sets a plan. */
export function renderPlan(plan: { seq: number; update: PlanUpdate } | undefined): string {
  if (!plan) {
    return "";
  }
  const { update, seq } = plan;
  const why = update.explanation ? ` <span class="plan-why">${escapeHtml(update.explanation)}</span>` : "";
  const steps = update.plan
    .map((e) => {
      // A status newer than these types shows as it came.
      const known = PLAN_MARKS[e.status] ?? { mark: "?", words: String(e.status) };
      return `<li class="plan-step ${escapeHtml(e.status)}" data-status="${escapeHtml(e.status)}" title="${escapeHtml(known.words)}"><span class="mark">${known.mark}</span> ${escapeHtml(e.step)}</li>`;
    })
    .join("");
  return (
    `<div class="plan" data-plan data-seq="${seq}"><div class="plan-head"><b>Plan</b> · ${escapeHtml(planSummary(update))}${why} <span class="seq">seq ${seq}</span></div>` +
    (steps ? `<ol class="plan-steps">${steps}</ol>` : "") +
    `</div>`
  );
}

function renderEntry(t: Transcript, e: Entry, images: ImageLookup): string {
  switch (e.kind) {
    case "turn":
      return `<div class="turn-start" data-seq="${e.seq}">Turn ${e.turn}</div>`;
    case "user":
      return `<div class="msg user" data-seq="${e.seq}"><div class="who">You <span class="seq">seq ${e.seq}</span></div><div class="text">${escapeHtml(e.text)}</div>${renderImages(e.images, images)}</div>`;
    case "context":
      return e.headline !== undefined ? renderNote({ ...e, headline: e.headline }) : `<div class="msg context" data-seq="${e.seq}"><span class="who">context${e.source ? ` · ${escapeHtml(e.source)}` : ""}</span> <span class="text">${escapeHtml(e.text)}</span> <span class="seq">seq ${e.seq}</span></div>`;
    case "steering": {
      const landed =
        e.landedStep !== undefined
          ? `<span class="landed">landed in step ${e.landedStep}</span>`
          : `<span class="landed pending">waits for the next request</span>`;
      return `<div class="msg steering" data-seq="${e.seq}"><div class="who">Steering <span class="seq">seq ${e.seq}</span> ${landed}</div><div class="text">${escapeHtml(e.text)}</div></div>`;
    }
    case "step":
      return renderStep(t, e.step, images);
    case "compact": {
      const replaced = e.replaced ? ` · seqs ${e.replaced.start}–${e.replaced.end} replaced at seq ${e.replaced.seq}` : "";
      const summary = e.summary ? `<details><summary>summary</summary><pre>${escapeHtml(e.summary)}</pre></details>` : "";
      return `<div class="compact" data-seq="${e.seq}">⇣ compaction (${escapeHtml(e.reason)}, ${formatTokens(e.tokensBefore)} prompt tokens before)${replaced}${summary}</div>`;
    }
    case "turnEnd": {
      const cls = e.reason === "completed" ? "ok" : e.reason === "cancelled" ? "cancelled" : e.reason === "limit" ? "limit" : "error";
      const err = e.error ? `: ${escapeHtml(e.error)}` : "";
      return `<div class="turn-end ${cls}" data-seq="${e.seq}">Turn ${e.turn} ${escapeHtml(e.reason)}${err}</div>`;
    }
    case "approval":
      return `<div class="approval-entry">${renderApproval(e.approval, true)}</div>`;
    case "mcpWait":
      return `<div class="notice mcp-wait" data-seq="${e.seq}" data-mcp-wait="${escapeHtml(e.wait.reason)}">${escapeHtml(mcpWaitText(e.wait))} <span class="seq">seq ${e.seq}</span></div>`;
    case "limit":
      return `<div class="notice limit" data-seq="${e.seq}" data-limit="${escapeHtml(e.limit.limit)}">⊘ ${escapeHtml(limitText(e.limit))} <span class="seq">seq ${e.seq}</span></div>`;
    case "notice":
      return `<div class="notice" data-seq="${e.seq}">${escapeHtml(e.text)}</div>`;
    case "child": {
      // The child's line opens its own transcript (where "saw" works as for any session).
      const c = e.spawn;
      const text = `⇢ sub-agent ${c.sessionId} (${c.context}, depth ${c.depth}): ${c.description}`;
      return (
        `<div class="notice child" data-seq="${e.seq}" data-child="${escapeHtml(c.sessionId)}"${e.step !== undefined ? ` data-child-step="${e.step}"` : ""}>` +
        `${escapeHtml(text)} <button data-action="openChild" data-session="${escapeHtml(c.sessionId)}" title="Open the sub-agent's transcript">open</button> <span class="seq">seq ${e.seq}</span></div>`
      );
    }
  }
}

/**
 * The one line a `turn/limit` reads as, the words `dsh prompt` prints: "step budget reached: 2
 * of 2 steps", "cost budget reached: $0.0012 of $0.001", "timeout reached: 30.0 s of 30 s".
 */
export function limitText(l: TurnLimit): string {
  switch (l.limit) {
    case "maxSteps":
      return `step budget reached: ${l.spent} of ${l.value} steps`;
    case "maxTokens":
      return `token budget reached: ${formatTokens(l.spent)} of ${formatTokens(l.value)} tokens`;
    case "maxCost":
      return `cost budget reached: ${formatMoney(l.spent, "USD")} of ${formatMoney(l.value, "USD")}`;
    case "timeout":
      return `timeout reached: ${l.spent.toFixed(1)} s of ${l.value} s`;
    default:
      // A budget newer than these types: named as it came.
      return `${String(l.limit)} reached: ${l.spent} of ${l.value}`;
  }
}

/** A workspace note: its one line, the step it joined, and the text the model reads folded
 * under it (a `details`, closed, as long tool results are). */
function renderNote(e: Extract<Entry, { kind: "context" }> & { headline: string }): string {
  const landed = e.landedStep !== undefined ? ` <span class="landed">joined step ${e.landedStep}</span>` : "";
  return (
    `<div class="msg context note" data-seq="${e.seq}" data-note="${escapeHtml(e.source ?? "")}">` +
    `<details data-key="note-${e.seq}"><summary title="the note the model reads; click to show it">` +
    `<span class="note-line">${escapeHtml(e.headline)}</span>${landed} <span class="seq">seq ${e.seq}</span></summary>` +
    `<pre class="note-text">${escapeHtml(e.text)}</pre></details></div>`
  );
}

/**
 * Images, each in a `figure` with its name, media type and size under it: loaded, an `<img>`
 * whose `data:` URL the page fills in from the bytes it was sent (`data-sha256`), a button that
 * opens it full size; still loading, a placeholder; not to be had (`objectNotFound`: missing from
 * the store, corrupt), a placeholder with the daemon's words. The transcript around it is whole.
 */
export function renderImages(refs: ImageRef[], images: ImageLookup): string {
  if (refs.length === 0) {
    return "";
  }
  const figures = refs.map((ref) => {
    const state = images(ref);
    const caption = `<figcaption>${escapeHtml(imageCaption(ref))}</figcaption>`;
    const attrs = `data-image="${escapeHtml(ref.sha256)}" data-state="${state.kind}"`;
    switch (state.kind) {
      case "loaded":
        return (
          `<figure class="image loaded" ${attrs}>` +
          `<button class="image-open" data-action="openImage" data-sha256="${escapeHtml(ref.sha256)}" title="Open ${escapeHtml(ref.name ?? "the image")} full size">` +
          `<img data-sha256="${escapeHtml(ref.sha256)}" alt="${escapeHtml(ref.name ?? "image")}"></button>${caption}</figure>`
        );
      case "missing":
        return `<figure class="image missing" ${attrs}><div class="image-placeholder">⚠ image not available: ${escapeHtml(state.error)}</div>${caption}</figure>`;
      case "loading":
        return `<figure class="image loading" ${attrs}><div class="image-placeholder">loading image…</div>${caption}</figure>`;
    }
  });
  return `<div class="images">${figures.join("")}</div>`;
}

/** One step: its header line (number, usage badge, actions), reasoning, text, tool calls. */
export function renderStep(_t: Transcript, s: StepView, images: ImageLookup = NO_IMAGES): string {
  const usage = s.row?.usage ?? s.usage;
  const cls = hitClass(usage, s.row);
  const why = dropExplanation(s.row);
  const badge = usage
    ? `<span class="usage ${cls}" data-usage="${s.step}" title="${escapeHtml(why ?? "")}">${usageBadgeInner(usage, s.row?.hitPercent ?? hitPercent(usage), s.row?.usage ? s.row.cost : undefined)}</span>`
    : s.state === "running"
      ? `<span class="usage none">streaming…</span>`
      : `<span class="usage none">no usage</span>`;
  const cause = why ? `<div class="cause ${s.row?.dropped ? "dropped" : ""}">${s.row?.dropped ? "⚠ " : ""}${escapeHtml(why)}</div>` : "";
  const steering = s.steering.length
    ? `<div class="steered">↳ steering (seq ${s.steering.join(", ")}) joined this request</div>`
    : "";
  const notes = s.notes.length ? `<div class="steered noted">↳ workspace note (seq ${s.notes.join(", ")}) joined this request</div>` : "";
  // Header changes the cause line does not already name.
  const header = s.headerChanges.filter((h) => h.kind === "delta" && !(why ?? "").includes(`seq ${h.seq}`)).map((h) => `<div class="hdr">${escapeHtml(h.what)} at seq ${h.seq}</div>`).join("");
  const reasoning = s.reasoning
    ? `<details class="reasoning" data-key="r${s.step}"><summary>reasoning · ${s.reasoning.length} chars</summary><div class="text">${escapeHtml(s.reasoning)}</div></details>`
    : "";
  const text = s.text ? `<div class="text answer">${escapeHtml(s.text)}</div>` : "";
  const calls = s.toolCalls
    .filter(Boolean)
    .map((c) => renderToolCall(c, images))
    .join("");
  const retries = s.retries.map((r) => `<div class="retry">retry after attempt ${r.attempt} (${escapeHtml(r.error)}), waiting ${r.delayMs} ms</div>`).join("");
  const label = s.state === "cancelled" ? "cancelled" : "error";
  const error = s.error ? `<div class="step-error ${s.state}">${s.error === label ? label : `${label}: ${escapeHtml(s.error)}`}</div>` : "";
  const state = s.state === "running" ? `<span class="spinner">●</span>` : s.state === "interrupted" ? `<span class="state">interrupted</span>` : "";
  const actions =
    `<span class="actions">` +
    `<button data-action="saw" data-step="${s.step}" title="What the model saw at step ${s.step}">saw</button>` +
    (s.step > 1 ? `<button data-action="diff" data-step="${s.step}" title="Diff with step ${s.step - 1}'s request">diff</button>` : "") +
    `<button data-action="fork" data-step="${s.step}" title="Fork a new session before step ${s.step}'s request (seq ${s.seq})">fork</button>` +
    `<button data-action="rewind" data-step="${s.step}" title="Rewind to before this step: the files and the conversation as they were before step ${s.step} ran (asks first)">rewind</button>` +
    `</span>`;
  return (
    `<section class="step ${s.state}" data-step="${s.step}" id="step-${s.step}">` +
    `<div class="step-head"><span class="step-no">Step ${s.step}</span> ${state} ${badge} ${actions}</div>` +
    cause +
    steering +
    notes +
    header +
    reasoning +
    text +
    calls +
    retries +
    error +
    `</section>`
  );
}

function usageBadgeInner(u: import("./protocol.generated").Usage, hit: number, cost?: import("./protocol.generated").Cost): string {
  return usageParts(u, hit, cost)
    .map((p) => `<span class="part ${p.label}"><b>${p.value}</b> ${p.label}</span>`)
    .join(`<span class="sep"> · </span>`);
}

function renderToolCall(c: ToolCallView, images: ImageLookup): string {
  const args = prettyArgs(c.args);
  // A result with images is open: they are what it shows.
  const open = c.result && (c.result.content.length < 400 || c.result.images.length > 0);
  const result = c.result
    ? `<details class="result ${c.result.isError ? "error" : ""}" data-key="res-${escapeHtml(c.id)}" ${open ? "open" : ""}><summary>${c.result.isError ? "✗ error" : "✓ result"} · seq ${c.result.seq}</summary><pre>${escapeHtml(c.result.content)}</pre>${renderImages(c.result.images, images)}</details>`
    : c.started
      ? `<div class="pending">running…</div>`
      : "";
  const progress = c.progress.length ? `<div class="progress">${c.progress.map(escapeHtml).join("<br>")}</div>` : "";
  return (
    `<div class="tool" data-call="${escapeHtml(c.id)}">` +
    `<div class="tool-head">⚙ ${toolName(c.name)} <span class="call-id">${escapeHtml(c.id)}</span>` +
    (c.unconfined ? ` <span class="unconfined" title="this command ran without the sandbox">unconfined</span>` : "") +
    `</div>` +
    `<pre class="args">${escapeHtml(args)}</pre>` +
    (c.approval ? renderApproval(c.approval) : "") +
    progress +
    result +
    `</div>`
  );
}

/** A tool's name in bold; an MCP tool's own name with its server's badge (`echo` `MCP · fx`),
 * the request name (`fx__echo`, what the model called) in its tooltip. */
export function toolName(name: string): string {
  const mcp = mcpTool(name);
  if (!mcp) {
    return `<b>${escapeHtml(name)}</b>`;
  }
  const title = `a tool of MCP server ${mcp.server}; the model calls it ${name}`;
  return `<b title="${escapeHtml(title)}">${escapeHtml(mcp.tool)}</b> <span class="mcp" data-mcp-server="${escapeHtml(mcp.server)}" title="${escapeHtml(title)}">${escapeHtml(mcpLabel(mcp.server))}</span>`;
}

/** How a verdict reads in the transcript. */
export function verdictText(decision: import("./protocol.generated").ApprovalVerdict): string {
  switch (decision) {
    case "allow":
      return "allowed";
    case "allowAlways":
      return "allowed always";
    case "allowUnconfined":
      return "allowed once, unconfined";
    case "deny":
      return "denied";
    case "timeout":
      return "timed out (denied)";
  }
}

/** An approval; `named` when it stands alone (no tool call around it names the tool). */
function renderApproval(a: import("./transcript").ApprovalView, named = false): string {
  const decided = a.decision
    ? `<span class="decision ${a.decision}">${verdictText(a.decision)}</span>`
    : `<span class="decision waiting">waiting for you</span> <button data-action="approve" data-approval="${escapeHtml(a.approvalId)}">answer</button>`;
  const sandbox = a.sandbox ? ` <span class="sandbox">[sandbox: ${escapeHtml(a.sandbox)}]</span>` : "";
  // Built-in tools are named by their summary; an MCP tool shows its server's badge.
  const tool = named && mcpTool(a.tool) ? `${toolName(a.tool)} ` : "";
  return `<div class="approval" data-approval="${escapeHtml(a.approvalId)}"><span class="approval-label">approval</span> ${tool}${escapeHtml(a.summary)}${sandbox} — ${decided}</div>`;
}

/** Tool arguments pretty-printed when they are complete JSON, else verbatim (still streaming). */
export function prettyArgs(args: string): string {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args;
  }
}
