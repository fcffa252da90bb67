// The current plan (`plan/update`, each replacing the last) pinned in the transcript's header,
// from a log built out of the generated protocol types.

import { test } from "node:test";
import assert from "node:assert/strict";
import type { LogEvent, SessionEvent } from "../src/protocol.generated";
import { planSummary, renderTranscript } from "../src/render";
import { Transcript } from "../src/transcript";

function log(list: LogEvent[]): SessionEvent[] {
  return list.map((e, seq) => ({ sessionId: "plans", seq, time: 0, ...e }));
}

const usage = { promptTokens: 1000, cacheHitTokens: 0, cacheMissTokens: 1000, completionTokens: 10, reasoningTokens: 0 };
const call = (id: string) => ({ id, name: "update_plan", arguments: "{}" });

test("the last plan is pinned in the header with each step's status", () => {
  const t = new Transcript("plans");
  const start: LogEvent[] = [
    { type: "session/meta", data: { formatVersion: 0, sessionId: "plans", workspace: "/w" } },
    { type: "turn/start", data: { turn: 1 } },
    { type: "user/message", data: { text: "plan <it>" } },
    { type: "step/start", data: { step: 1, turn: 1 } },
  ];
  t.applyAll(log(start));
  assert.equal(t.plan, undefined);
  assert.ok(!renderTranscript(t).includes("data-plan"));
  const rest: LogEvent[] = [
    { type: "assistant/message", data: { step: 1, message: { content: "", toolCalls: [call("p1"), call("p2")] } } },
    { type: "tool/result", data: { callId: "p1", name: "update_plan", content: "Plan updated: 0 of 2 steps completed." } },
    { type: "plan/update", data: { callId: "p1", explanation: "Two <steps>.", plan: [{ step: "Read", status: "in_progress" }, { step: "Fix", status: "pending" }] } },
    { type: "tool/result", data: { callId: "p2", name: "update_plan", content: "Plan updated: 1 of 2 steps completed." } },
    { type: "plan/update", data: { callId: "p2", plan: [{ step: "Read", status: "completed" }, { step: "Fix & test", status: "in_progress" }] } },
    { type: "step/end", data: { step: 1, finishReason: "tool_calls", usage } },
    { type: "turn/end", data: { turn: 1, reason: "completed" } },
  ];
  t.applyAll(log([...start, ...rest]).slice(start.length));
  // (`t.plan` was narrowed to undefined by the assertion above.)
  const current = (t as Transcript).plan;
  assert.equal(current?.seq, 8);
  const html = renderTranscript(t);
  const header = html.slice(0, html.indexOf("</header>"));
  assert.ok(header.includes(`data-plan data-seq="8"`), header);
  assert.ok(header.includes("1 of 2 completed"), header);
  assert.ok(!header.includes("Two &lt;steps&gt;."), "the explanation is the last plan's");
  assert.ok(header.includes(`data-status="completed"`) && header.includes(`data-status="in_progress"`), header);
  assert.ok(header.includes("Fix &amp; test"), header);
  // The plan is above the transcript's entries.
  assert.ok(html.indexOf("data-plan") < html.indexOf("turn-start"), html);
  assert.equal(planSummary({ callId: "c", plan: [] }), "cleared");
});
