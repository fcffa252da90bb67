import { test } from "node:test";
import assert from "node:assert/strict";
import type { Price, SessionSummary, SessionUsageResult, Usage, UsageEntry } from "../src/protocol.generated";
import { dropExplanation, formatMoney, formatPercent, formatShort, formatUsage, hitClass, hitPercent, sessionDescription, statusText, stepAnnotation, usageMarkdown } from "../src/usage";
import { expectedCost } from "./support";

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
    causes: [{ kind: "systemChanged", seq: 145, foldedInstructions: false }],
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

test("formatMoney rounds to the millionth and cuts trailing zeros to two decimals, as `dsh usage` does", () => {
  // The CLI's own examples (server/cli/src/text.rs).
  assert.equal(formatMoney(0.0003353, "USD"), "$0.000335");
  assert.equal(formatMoney(0.14, "USD"), "$0.14");
  assert.equal(formatMoney(0.0028, "CNY"), "0.0028 CNY");
  assert.equal(formatMoney(0, "USD"), "$0.00");
  assert.equal(formatMoney(12.5, "EUR"), "12.50 EUR");
  assert.equal(formatMoney(0.0000004, "USD"), "$0.00");
  assert.equal(formatMoney(0.0000005000001, "USD"), "$0.000001");
  // An exact tie rounds to the even digit, as Rust's `{:.6}` does (`toFixed` would give 0.007813).
  assert.equal(formatMoney(0.0078125, "USD"), "$0.007812");
  assert.equal(formatMoney(0.0234375, "USD"), "$0.023438");
});

test("the CLI's hand-computed usage table, in the editor's figures", () => {
  // server/cli/src/text.rs: at $0.0028 / $0.14 / $0.28 per million, step 1 = (10,000 × 0.14 +
  // 500 × 0.28) / 10⁶ = $0.00154; step 2 = (9,984 × 0.0028 + 516 × 0.14 + 300 × 0.28) / 10⁶ =
  // $0.000184; the cache saved 9,984 × (0.14 − 0.0028) / 10⁶ = $0.00137.
  const price: Price = { cacheHit: 0.0028, cacheMiss: 0.14, output: 0.28, currency: "USD" };
  const usages = [u(10_000, 0, 500), u(10_500, 9_984, 300)];
  const costs = usages.map((x) => ({ ...expectedCost(x, price), currency: "USD" }));
  const rows: UsageEntry[] = usages.map((x, i) => ({
    step: i + 1,
    turn: 1,
    seq: (i + 1) * 10,
    usage: x,
    hitPercent: hitPercent(x),
    dropped: false,
    causes: [],
    profile: "deepseek",
    model: "deepseek-v4-flash",
    cost: costs[i],
    explanation: "",
  }));
  const cost = { amount: costs[0].amount + costs[1].amount, saved: costs[0].saved + costs[1].saved, currency: "USD" };
  const result: SessionUsageResult = {
    rows,
    totals: u(20_500, 9_984, 800),
    cost,
    prices: [{ profile: "deepseek", model: "deepseek-v4-flash", price }],
    contextWindow: 1_048_576,
    profile: "deepseek",
    model: "deepseek-v4-flash",
  };
  const table = usageMarkdown("s1", result).split("\n");
  assert.ok(table.includes("| 1 | 1 | 10,000 | 0 | 10,000 | 500 | 0.0% | $0.00154 |  |"), table.join("\n"));
  assert.ok(table.includes("| 1 | 2 | 10,500 | 9,984 | 516 | 300 | 95.1% | $0.000184 |  |"), table.join("\n"));
  assert.ok(table.includes("| | **total** | 20,500 | 9,984 | 10,516 | 800 | 48.7% | $0.001724 | |"), table.join("\n"));
  assert.ok(table.includes("cost $0.001724 · the cache saved $0.00137 (the same tokens at the cache-miss price: $0.003094)"));
  assert.ok(table.includes("- prices of deepseek/deepseek-v4-flash per million tokens: cache hit $0.0028, cache miss $0.14, output $0.28"));
  assert.equal(stepAnnotation(rows[1].usage, rows[1]), "prompt 10,500 · cached 9,984 · new 516 · out 300 · hit 95.1% · cost $0.000184");
  assert.equal(statusText(undefined, result.totals, cost), "Σ prompt 20.5k · cached 9.98k · out 800 · hit 48.7% · $0.001724");
  // Without a price: no cost, never $0.
  const unpriced = { ...rows[1], cost: undefined };
  assert.equal(stepAnnotation(unpriced.usage, unpriced), "prompt 10,500 · cached 9,984 · new 516 · out 300 · hit 95.1%");
  const unknown = usageMarkdown("s1", { ...result, rows: [rows[0], unpriced], cost: undefined, prices: [] });
  assert.ok(unknown.includes("| 1 | 2 | 10,500 | 9,984 | 516 | 300 | 95.1% | – |  |"), unknown);
  assert.ok(unknown.includes("| 48.7% | – | |") && unknown.includes("cost unknown: no price configured for a model of this session"), unknown);
});

test("a session in the list shows its total cost and its profile/model", () => {
  const s: SessionSummary = { sessionId: "s1", workspace: "/w", createdMs: 0, updatedMs: 0, turns: 1, steps: 2, running: false, lastUsage: u(10_500, 9_984, 300), profile: "deepseek", model: "deepseek-v4-flash", cost: { amount: 0.001724, saved: 0.00137, currency: "USD" } };
  assert.equal(sessionDescription(s), "2 steps · last hit 95.1% · $0.001724 · deepseek/deepseek-v4-flash");
  assert.equal(sessionDescription({ ...s, cost: undefined, running: true }), "2 steps · last hit 95.1% · running · deepseek/deepseek-v4-flash");
  assert.equal(sessionDescription({ ...s, steps: 0, lastUsage: undefined, cost: undefined, profile: undefined, model: undefined }), "0 steps");
});
