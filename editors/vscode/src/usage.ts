// Usage formatting: `prompt · cached · new · out · hit % · cost` for a step, its color class by
// hit ratio, the words for a cache drop (the daemon's `explanation`), money as `dsh usage` prints
// it, and the usage table. No `vscode`.

import type { Cost, PriceUsed, SessionSummary, SessionUsageResult, Usage, UsageEntry } from "./protocol.generated";

/** Cache hit ratio in percent (0 with no prompt tokens). */
export function hitPercent(u: Usage): number {
  return u.promptTokens > 0 ? (u.cacheHitTokens / u.promptTokens) * 100 : 0;
}

/** `12,345`. */
export function formatTokens(n: number): string {
  return Math.round(n).toLocaleString("en-US");
}

/** `845`, `2.49k`, `16.9k`, `1.23M`: for tight places (the status bar). */
export function formatShort(n: number): string {
  if (n < 1000) {
    return String(Math.round(n));
  }
  const [div, unit] = n < 1_000_000 ? [1000, "k"] : [1_000_000, "M"];
  const v = n / div;
  const s = v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0);
  return s.replace(/\.?0+$/, "") + unit;
}

/** `97.0%` (one decimal, as `dsh usage` prints it). */
export function formatPercent(p: number): string {
  return `${p.toFixed(1)}%`;
}

/**
 * An amount of money as `dsh usage` prints it (the CLI's `money()`): rounded to the millionth,
 * trailing zeros cut down to two decimals; dollars with `$` in front, any other currency named
 * after the number. `$0.000335`, `$0.14`, `0.0028 CNY`.
 */
export function formatMoney(amount: number, currency: string): string {
  let digits = toFixedHalfEven(amount, 6);
  const keep = digits.indexOf(".") + 3;
  while (digits.endsWith("0") && digits.length > keep) {
    digits = digits.slice(0, -1);
  }
  return currency === "USD" ? `$${digits}` : `${digits} ${currency}`;
}

/**
 * `x.toFixed(decimals)`, except that a value exactly halfway rounds to the even digit, as Rust's
 * (and C's) formatting does, where `toFixed` rounds it away from zero: 0.0078125 is `0.007812`.
 * Without this a cost on such a tie would read one millionth apart from `dsh usage`.
 */
function toFixedHalfEven(x: number, decimals: number): string {
  const rounded = x.toFixed(decimals);
  // The exact decimal value of the double (a tie has only `decimals + 1` fractional digits).
  const exact = x.toFixed(100);
  const cut = exact.indexOf(".") + 1 + decimals;
  if (!/^50*$/.test(exact.slice(cut))) {
    return rounded;
  }
  const truncated = exact.slice(0, cut);
  return Number(truncated.at(-1)) % 2 === 0 ? truncated : rounded;
}

/** A cost as money, or undefined when no price is known (never `$0` for an unknown price). */
export function formatCost(cost: Cost | undefined): string | undefined {
  return cost ? formatMoney(cost.amount, cost.currency) : undefined;
}

/** `prompt 2,491 · cached 192 · new 2,299 · out 76 · hit 7.7%`, then ` · cost $0.000335` when
 * the step's price is known. */
export function formatUsage(u: Usage, hit = hitPercent(u), cost?: Cost): string {
  return usageParts(u, hit, cost)
    .map((p) => `${p.label} ${p.value}`)
    .join(" · ");
}

/** The parts of [`formatUsage`], for views that style each. */
export function usageParts(u: Usage, hit = hitPercent(u), cost?: Cost): Array<{ label: string; value: string }> {
  const parts = [
    { label: "prompt", value: formatTokens(u.promptTokens) },
    { label: "cached", value: formatTokens(u.cacheHitTokens) },
    { label: "new", value: formatTokens(u.cacheMissTokens) },
    { label: "out", value: formatTokens(u.completionTokens) },
    { label: "hit", value: formatPercent(hit) },
  ];
  const money = formatCost(cost);
  if (money !== undefined) {
    parts.push({ label: "cost", value: money });
  }
  return parts;
}

/** `cost $0.001724 · the cache saved $0.00137`: a session's (or step's) money in one line. */
export function formatCostSaved(cost: Cost): string {
  return `cost ${formatMoney(cost.amount, cost.currency)} · the cache saved ${formatMoney(cost.saved, cost.currency)}`;
}

/** `deepseek/deepseek-v4-flash per million tokens: cache hit $0.0028, cache miss $0.14, output
 * $0.28` — the prices a usage view used, as `dsh usage` names them. */
export function formatPrices(used: PriceUsed): string {
  const p = used.price;
  return (
    `prices of ${used.profile}/${used.model} per million tokens: cache hit ${formatMoney(p.cacheHit, p.currency)}, ` +
    `cache miss ${formatMoney(p.cacheMiss, p.currency)}, output ${formatMoney(p.output, p.currency)}`
  );
}

/** The usage table (`dsh: Show Usage Table`) as Markdown: one row per step with its cost, the
 * totals, the session's cost and what the cache saved, and the prices used — what `dsh usage`
 * prints, in the same figures. */
export function usageMarkdown(sessionId: string, u: SessionUsageResult): string {
  const dash = "–";
  const lines = [
    `# Usage — session ${sessionId}`,
    "",
    "| turn | step | prompt | cached | new | out | hit | cost | cause of a cache drop |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
  ];
  for (const r of u.rows) {
    const x = r.usage;
    const cells = x
      ? [formatTokens(x.promptTokens), formatTokens(x.cacheHitTokens), formatTokens(x.cacheMissTokens), formatTokens(x.completionTokens), formatPercent(r.hitPercent), formatCost(r.cost) ?? dash]
      : [dash, dash, dash, dash, dash, dash];
    lines.push(`| ${r.turn} | ${r.step} | ${cells.join(" | ")} | ${r.dropped ? "⚠ " : ""}${r.explanation} |`);
  }
  const t = u.totals;
  lines.push(
    `| | **total** | ${formatTokens(t.promptTokens)} | ${formatTokens(t.cacheHitTokens)} | ${formatTokens(t.cacheMissTokens)} | ${formatTokens(t.completionTokens)} | ${formatPercent(hitPercent(t))} | ${formatCost(u.cost) ?? dash} | |`,
    "",
  );
  if (u.cost) {
    const c = u.cost;
    lines.push(`${formatCostSaved(c)} (the same tokens at the cache-miss price: ${formatMoney(c.amount + c.saved, c.currency)})`, "");
  } else if (u.rows.some((r) => r.usage)) {
    lines.push("cost unknown: no price configured for a model of this session (see `dsh config`)", "");
  }
  for (const used of u.prices) {
    lines.push(`- ${formatPrices(used)}`);
  }
  if (u.prices.length) {
    lines.push("");
  }
  return lines.join("\n");
}

/**
 * The color class of a step's usage: `cold` for the first request of a session (nothing can be
 * cached yet), `high` from 80 %, `mid` from 40 %, `low` below, `none` without usage.
 */
export type HitClass = "cold" | "high" | "mid" | "low" | "none";

export function hitClass(usage: Usage | undefined, row?: Pick<UsageEntry, "hitPercent" | "causes">): HitClass {
  if (!usage) {
    return "none";
  }
  if (row?.causes.some((c) => c.kind === "firstRequest")) {
    return "cold";
  }
  const p = row?.hitPercent ?? hitPercent(usage);
  return p >= 80 ? "high" : p >= 40 ? "mid" : "low";
}

/** A one-line annotation of a step: its usage and, when the cache dropped, why. */
export function stepAnnotation(usage: Usage | undefined, row?: UsageEntry): string {
  if (!usage) {
    return row?.explanation ? `no usage · ${row.explanation}` : "no usage";
  }
  const text = formatUsage(usage, row?.hitPercent ?? hitPercent(usage), row?.cost);
  const why = dropExplanation(row);
  return why ? `${text} — ${why}` : text;
}

/** The daemon's words for a cache drop (or first request); undefined when nothing dropped. */
export function dropExplanation(row: UsageEntry | undefined): string | undefined {
  if (!row) {
    return undefined;
  }
  if (row.dropped) {
    return `cache dropped: ${row.explanation || "no logged cause (provider-side eviction)"}`;
  }
  return row.explanation || undefined;
}

/** Status-bar text: `step 7 · hit 98.8% │ Σ prompt 16.9k · cached 12.2k · out 319 · hit 72.4% ·
 * $0.000777` (the session's cost when its prices are known). */
export function statusText(current: { step: number; usage?: Usage; running: boolean; state?: string } | undefined, totals: Usage, cost?: Cost): string {
  const parts: string[] = [];
  if (current) {
    if (current.running) {
      parts.push(`step ${current.step} running`);
    } else if (current.state === "cancelled" || current.state === "error" || current.state === "interrupted") {
      parts.push(`step ${current.step} ${current.state}`);
    } else if (current.usage) {
      parts.push(`step ${current.step} · hit ${formatPercent(hitPercent(current.usage))}`);
    } else {
      parts.push(`step ${current.step}`);
    }
  }
  parts.push(
    `Σ prompt ${formatShort(totals.promptTokens)} · cached ${formatShort(totals.cacheHitTokens)} · out ${formatShort(totals.completionTokens)} · hit ${formatPercent(hitPercent(totals))}` +
      (cost ? ` · ${formatMoney(cost.amount, cost.currency)}` : ""),
  );
  return parts.join(" │ ");
}

/**
 * A session in the list: `fork · 7 steps · hit 72.4% · $0.000777 · running · deepseek/deepseek-v4-flash`.
 * `live` is its open transcript, fresher than the listing; the cost is the listing's (every
 * finished step at its profile's prices) unless the transcript has a newer one, and absent when
 * a step ran on a model without prices.
 */
export function sessionDescription(s: SessionSummary, live?: { steps: number; totals: Usage; running: boolean; cost?: Cost }): string {
  const steps = live ? live.steps : s.steps;
  const totals = live?.totals;
  const cost = formatCost(live?.cost ?? s.cost);
  return (
    (s.forkedFrom ? "fork · " : "") +
    `${steps} step${steps === 1 ? "" : "s"}` +
    (totals && totals.promptTokens ? ` · hit ${formatPercent(hitPercent(totals))}` : s.lastUsage ? ` · last hit ${formatPercent(hitPercent(s.lastUsage))}` : "") +
    (cost !== undefined ? ` · ${cost}` : "") +
    ((live ? live.running : s.running) ? " · running" : "") +
    (s.profile && s.model ? ` · ${s.profile}/${s.model}` : s.model ? ` · ${s.model}` : "")
  );
}
