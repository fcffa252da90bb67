// A budget reached (`turn/limit`, then `turn/end {reason: "limit"}`) in the transcript, from a
// log built out of the generated protocol types; the words are the ones `dsh prompt` prints.

import { test } from "node:test";
import assert from "node:assert/strict";
import type { LogEvent, SessionEvent } from "../src/protocol.generated";
import { limitText, renderTranscript } from "../src/render";
import { Transcript } from "../src/transcript";

function log(list: LogEvent[]): SessionEvent[] {
  return list.map((e, seq) => ({ sessionId: "limits", seq, time: 0, ...e }));
}

const usage = { promptTokens: 1000, cacheHitTokens: 0, cacheMissTokens: 1000, completionTokens: 10, reasoningTokens: 0 };

test("a budget reached reads as the CLI says it", () => {
  assert.equal(limitText({ limit: "maxSteps", value: 1, spent: 1 }), "step budget reached: 1 of 1 steps");
  assert.equal(limitText({ limit: "maxTokens", value: 10000, spent: 12345 }), "token budget reached: 12,345 of 10,000 tokens");
  assert.equal(limitText({ limit: "maxCost", value: 0.001, spent: 0.001234 }), "cost budget reached: $0.001234 of $0.001");
  assert.equal(limitText({ limit: "timeout", value: 2, spent: 2.003 }), "timeout reached: 2.0 s of 2 s");
});

test("the limit shows before the turn's end, which is marked as stopped by a limit", () => {
  const t = new Transcript("limits");
  t.applyAll(
    log([
      { type: "session/meta", data: { formatVersion: 0, sessionId: "limits", workspace: "/w" } },
      { type: "turn/start", data: { turn: 1 } },
      { type: "user/message", data: { text: "go" } },
      { type: "step/start", data: { step: 1, turn: 1 } },
      { type: "step/end", data: { step: 1, finishReason: "tool_calls", usage } },
      { type: "turn/limit", data: { limit: "maxSteps", value: 1, spent: 1 } },
      { type: "turn/end", data: { turn: 1, reason: "limit" } },
    ]),
  );
  assert.equal(t.running, false);
  assert.deepEqual(t.turns[0].end, { reason: "limit", error: undefined });
  const html = renderTranscript(t);
  const limit = html.indexOf(`data-limit="maxSteps"`);
  assert.ok(limit > 0, html);
  assert.ok(html.includes("step budget reached: 1 of 1 steps"), html);
  const end = html.indexOf(`class="turn-end limit"`);
  assert.ok(end > limit, "the turn's end follows the limit");
});
