// "What the model saw" at a step (`session/request` with `diff: true`): the readable view
// (system prompt, tools, messages with their seqs), the wire JSON exactly as rebuilt, and the
// unified diff against the previous step's request.

import type { SessionRequestResult } from "../../editors/vscode/src/protocol.generated";
import { element } from "./dom";

export type SawView = "readable" | "wire" | "diff";

const SHOWN = 200_000;

function clip(text: string): string {
  return text.length > SHOWN ? `${text.slice(0, SHOWN)}\n… (${text.length - SHOWN} more characters)` : text;
}

export function renderReadable(result: SessionRequestResult): HTMLElement {
  const root = element("div", "saw-readable");
  const config = result.header.config;
  root.append(element("p", "saw-meta", `step ${result.step} · turn ${result.turn} · ${config.model} · ${result.messages.length} messages · ${result.wire.bytes} bytes (${result.wire.adapter})`));
  if (result.header.system !== undefined) {
    const system = element("details", "fold");
    system.append(element("summary", undefined, `system prompt (${result.header.system.length} chars)`), element("pre", undefined, clip(result.header.system)));
    root.append(system);
  }
  const tools = result.header.tools ?? [];
  if (tools.length) {
    const details = element("details", "fold");
    details.append(element("summary", undefined, `${tools.length} tools: ${tools.map((tool) => tool.name).join(", ")}`));
    details.append(element("pre", undefined, clip(JSON.stringify(tools, null, 2))));
    root.append(details);
  }
  const list = element("ol", "saw-messages");
  for (const { seq, message } of result.messages) {
    const item = element("li", `saw-message role-${message.role}`);
    const head = element("div", "who", `${message.role} · seq ${seq}`);
    item.append(head);
    switch (message.role) {
      case "system":
      case "user":
        item.append(element("pre", undefined, clip(message.content)));
        break;
      case "tool":
        head.textContent = `tool result ${message.callId} · seq ${seq}`;
        item.append(element("pre", undefined, clip(message.content)));
        break;
      case "assistant":
        if (message.reasoningContent) {
          const thinking = element("details", "fold thinking");
          thinking.append(element("summary", undefined, "thinking"), element("pre", undefined, clip(message.reasoningContent)));
          item.append(thinking);
        }
        item.append(element("pre", undefined, clip(message.content)));
        for (const call of message.toolCalls ?? []) {
          item.append(element("pre", "call", `→ ${call.name}(${clip(call.arguments)})`));
        }
        break;
    }
    list.append(item);
  }
  root.append(list);
  return root;
}

export function renderWire(result: SessionRequestResult): HTMLElement {
  let text = result.wire.body;
  if (text.length < 5_000_000) {
    try {
      text = JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      // shown as it is
    }
  }
  const root = element("div", "saw-wire");
  root.append(element("p", "saw-meta", `sha256 ${result.wire.sha256} · ${result.wire.bytes} bytes`), element("pre", "wire", clip(text)));
  return root;
}

export function renderDiff(result: SessionRequestResult): HTMLElement {
  const root = element("div", "saw-diff");
  if (result.diff === undefined || result.diff === "") {
    root.append(element("p", "saw-meta", result.step <= 1 ? "the first step has no previous request" : "no difference from the previous step"));
    return root;
  }
  const pre = element("pre", "diff");
  const lines = result.diff.split("\n");
  const shown = lines.slice(0, 20_000);
  for (const line of shown) {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "file" : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "same";
    pre.append(element("span", `line ${kind}`, `${line}\n`));
  }
  if (lines.length > shown.length) {
    pre.append(element("span", "line same", `… ${lines.length - shown.length} more lines\n`));
  }
  root.append(pre);
  return root;
}
