// "What the model saw": a step's rebuilt request (`session/request`) as a read-only text
// document, laid out so that two steps diff well line by line. No `vscode`.

import type { Message, SessionRequestResult, ToolSchema } from "./protocol.generated";
import { formatUsage, hitPercent } from "./usage";

export type SawOptions = {
  sessionId: string;
  /** Include the exact wire body (one long line) at the end. */
  wireBody?: boolean;
};

export function renderSaw(r: SessionRequestResult, o: SawOptions): string {
  const out: string[] = [];
  const push = (...lines: string[]) => out.push(...lines);
  const h = r.header;

  push(`# What the model saw — session ${o.sessionId}, step ${r.step} (turn ${r.turn})`);
  push("");
  push(`boundary: seq ${r.boundarySeq} (the step/start of step ${r.step}; fork at it to redo this request)`);
  push(`header events: ${r.headerEvents.length ? r.headerEvents.map((s) => `seq ${s}`).join(", ") : "none (carried forward)"}`);
  push(`wire: ${r.wire.adapter} · ${r.wire.bytes} bytes · sha256 ${r.wire.sha256}`);
  if (r.sent) {
    const same = r.sent.sha256 === r.wire.sha256 && r.sent.bytes === r.wire.bytes;
    push(
      `sent: ${r.sent.adapter} · ${r.sent.bytes} bytes · sha256 ${r.sent.sha256} — ` +
        (same ? "matches the rebuilt body byte for byte" : "DIFFERS from the rebuilt body"),
    );
  } else {
    push("sent: not recorded (the step did not get that far)");
  }
  push(`usage: ${r.usage ? formatUsage(r.usage, hitPercent(r.usage)) : "none (the step did not finish)"}`);
  push("");

  push("## Header");
  const c = h.config;
  const cfg = [`model ${c.model}`, `max_tokens ${c.maxTokens}`, `thinking ${c.thinking ? "on" : "off"}`];
  if (c.reasoningEffort !== undefined) {
    cfg.push(`reasoning_effort ${c.reasoningEffort}`);
  }
  if (c.temperature !== undefined) {
    cfg.push(`temperature ${c.temperature}`);
  }
  if (c.topP !== undefined) {
    cfg.push(`top_p ${c.topP}`);
  }
  push(cfg.join(" · "));
  push("");

  const system = h.system ?? "";
  const systemLines = system === "" ? [] : system.split("\n");
  push(`## System prompt (${systemLines.length} lines)`);
  for (const l of systemLines) {
    push(`  | ${l}`);
  }
  push("");

  const tools = h.tools ?? [];
  push(`## Tools (${tools.length})`);
  for (const t of tools) {
    push(...renderTool(t));
  }
  push("");

  push(`## Messages (${r.messages.length})`);
  for (const m of r.messages) {
    push(...renderMessage(m.seq, m.message));
  }
  push("");

  if (o.wireBody !== false) {
    push(`## Wire body (exact, ${r.wire.bytes} bytes, sha256 ${r.wire.sha256})`);
    push(r.wire.body);
    push("");
  }
  return out.join("\n");
}

function renderTool(t: ToolSchema): string[] {
  const lines = [`### ${t.name}`];
  for (const l of t.description.split("\n")) {
    lines.push(`  ${l}`);
  }
  lines.push(...JSON.stringify(t.parameters, null, 2).split("\n").map((l) => `  ${l}`));
  return lines;
}

function renderMessage(seq: number, m: Message): string[] {
  const lines: string[] = [];
  const indent = (text: string) => text.split("\n").map((l) => `    ${l}`);
  switch (m.role) {
    case "system":
    case "user":
      lines.push(`[seq ${seq}] ${m.role}`, ...indent(m.content));
      break;
    case "tool":
      lines.push(`[seq ${seq}] tool ${m.callId}`, ...indent(m.content));
      break;
    case "assistant": {
      lines.push(`[seq ${seq}] assistant`);
      if (m.reasoningContent !== undefined) {
        lines.push("  reasoning:", ...indent(m.reasoningContent));
      }
      if (m.content !== "") {
        lines.push("  content:", ...indent(m.content));
      }
      for (const tc of m.toolCalls ?? []) {
        lines.push(`  call ${tc.id} ${tc.name} ${tc.arguments}`);
      }
      break;
    }
  }
  return lines;
}
