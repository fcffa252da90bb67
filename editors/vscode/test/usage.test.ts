import { test } from "node:test";
import assert from "node:assert/strict";
import type { Usage, UsageEntry } from "../src/protocol.generated";
import { dropExplanation, formatPercent, formatShort, formatUsage, hitClass, hitPercent, statusText, stepAnnotation } from "../src/usage";

const u = (p: number, hit: number, out: number): Usage => ({
  promptTokens: p,
  cacheHitTokens: hit,
  cacheMissTokens: p - hit,
  completionTokens: out,
  reasoningTokens: 0,
});

test("formatUsage prints prompt · cached · new · out · hit %", () => {
  assert.equal(formatUsage(u(2491, 192, 76)), "prompt 2,491 · cached 192 · new 2,299 · out 76 · hit 7.7%");
  assert.equal(formatUsage(u(0, 0, 0)), "prompt 0 · cached 0 · new 0 · out 0 · hit 0.0%");
  // The daemon's hit percent wins when given.
  assert.equal(formatUsage(u(3, 1, 1), 33.3333), "prompt 3 · cached 1 · new 2 · out 1 · hit 33.3%");
});

test("hitPercent and formatPercent", () => {
  assert.equal(hitPercent(u(0, 0, 0)), 0);
  assert.equal(formatPercent(hitPercent(u(2244, 2176, 63))), "97.0%");
  assert.equal(formatPercent(100), "100.0%");
});

test("formatShort keeps tight places readable", () => {
  assert.deepEqual([0, 845, 1000, 2491, 16890, 123456, 1_234_567].map(formatShort), ["0", "845", "1k", "2.49k", "16.9k", "123k", "1.23M"]);
});

test("hitClass colors by ratio; the first request is cold, no usage is none", () => {
  assert.equal(hitClass(undefined), "none");
  assert.equal(hitClass(u(100, 0, 1), { hitPercent: 0, causes: [{ kind: "firstRequest", seq: 5 }] }), "cold");
  assert.equal(hitClass(u(100, 95, 1)), "high");
  assert.equal(hitClass(u(100, 80, 1)), "high");
  assert.equal(hitClass(u(100, 50, 1)), "mid");
  assert.equal(hitClass(u(100, 7, 1)), "low");
  assert.equal(hitClass(u(100, 7, 1), { hitPercent: 90, causes: [] }), "high");
});

test("a dropped step names its cause from the log", () => {
  const row: UsageEntry = {
    step: 5,
    turn: 2,
    seq: 144,
    usage: u(2491, 192, 76),
    hitPercent: 7.707747892412686,
    dropped: true,
    causes: [{ kind: "systemChanged", seq: 145 }],
    explanation: "system prompt changed at seq 145",
  };
  assert.equal(dropExplanation(row), "cache dropped: system prompt changed at seq 145");
  assert.equal(stepAnnotation(row.usage, row), "prompt 2,491 · cached 192 · new 2,299 · out 76 · hit 7.7% — cache dropped: system prompt changed at seq 145");
  assert.equal(dropExplanation({ ...row, explanation: "" }), "cache dropped: no logged cause (provider-side eviction)");
  assert.equal(dropExplanation({ ...row, dropped: false, explanation: "" }), undefined);
  assert.equal(dropExplanation({ ...row, dropped: false, explanation: "first request" }), "first request");
  assert.equal(stepAnnotation(undefined, { ...row, usage: undefined }), "no usage · system prompt changed at seq 145");
});

test("statusText shows the live step and the session totals", () => {
  const totals = u(16890, 12224, 319);
  assert.equal(statusText({ step: 7, running: true }, totals), "step 7 running │ Σ prompt 16.9k · cached 12.2k · out 319 · hit 72.4%");
  assert.equal(statusText({ step: 7, running: false, usage: u(2655, 2624, 37) }, totals), "step 7 · hit 98.8% │ Σ prompt 16.9k · cached 12.2k · out 319 · hit 72.4%");
  assert.equal(statusText({ step: 8, running: false, state: "cancelled" }, totals), "step 8 cancelled │ Σ prompt 16.9k · cached 12.2k · out 319 · hit 72.4%");
  assert.equal(statusText(undefined, u(0, 0, 0)), "Σ prompt 0 · cached 0 · out 0 · hit 0.0%");
});
