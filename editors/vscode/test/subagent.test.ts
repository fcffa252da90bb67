// A `task` call's sub-agent (`task/spawn`, docs/subagents.md) in the transcript: one line naming
// the child session under the step that spawned it, from a log built out of the generated types.

import { test } from "node:test";
import assert from "node:assert/strict";
import type { LogEvent, SessionEvent } from "../src/protocol.generated";
import { renderTranscript } from "../src/render";
import { Transcript } from "../src/transcript";

function log(list: LogEvent[]): SessionEvent[] {
  return list.map((e, seq) => ({ sessionId: "parent", seq, time: 0, ...e }));
}

test("a sub-agent shows as one line naming its session, after its step's call", () => {
  const t = new Transcript("parent");
  t.applyAll(
    log([
      { type: "session/meta", data: { formatVersion: 0, sessionId: "parent", workspace: "/w" } },
      { type: "turn/start", data: { turn: 1 } },
      { type: "user/message", data: { text: "Delegate." } },
      { type: "step/start", data: { step: 1, turn: 1 } },
      {
        type: "assistant/message",
        data: { step: 1, message: { content: "", toolCalls: [{ id: "c1", name: "task", arguments: "{}" }] } },
      },
      { type: "tool/call", data: { step: 1, callId: "c1", name: "task" } },
      { type: "task/spawn", data: { callId: "c1", sessionId: "child-1", context: "fresh", description: "find it", depth: 1 } },
    ]),
  );
  const html = renderTranscript(t);
  assert.ok(html.includes("⇢ sub-agent child-1 (fresh, depth 1): find it"), html);
  assert.ok(html.indexOf("Delegate.") < html.indexOf("sub-agent child-1"), "in log order");
  // The line is a button that opens the child, and the step knows its child.
  assert.match(html, /<div class="notice child" data-seq="6" data-child="child-1" data-child-step="1">/);
  assert.ok(html.includes('<button data-action="openChild" data-session="child-1"'), html);
  assert.deepEqual(
    t.steps.get(1)?.children.map((c) => c.sessionId),
    ["child-1"],
  );
});
