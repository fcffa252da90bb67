// Usage formatting: `prompt · cached · new · out · hit %` for a step, its color class by hit
// ratio, and the words for a cache drop (the daemon's `explanation`). No `vscode`.

import type { Usage, UsageEntry } from "./protocol.generated";

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

/** `prompt 2,491 · cached 192 · new 2,299 · out 76 · hit 7.7%`. */
export function formatUsage(u: Usage, hit = hitPercent(u)): string {
  return [
    `prompt ${formatTokens(u.promptTokens)}`,
    `cached ${formatTokens(u.cacheHitTokens)}`,
    `new ${formatTokens(u.cacheMissTokens)}`,
    `out ${formatTokens(u.completionTokens)}`,
    `hit ${formatPercent(hit)}`,
  ].join(" · ");
}

/** The parts of [`formatUsage`], for views that style each. */
export function usageParts(u: Usage, hit = hitPercent(u)): Array<{ label: string; value: string }> {
  return [
    { label: "prompt", value: formatTokens(u.promptTokens) },
    { label: "cached", value: formatTokens(u.cacheHitTokens) },
    { label: "new", value: formatTokens(u.cacheMissTokens) },
    { label: "out", value: formatTokens(u.completionTokens) },
    { label: "hit", value: formatPercent(hit) },
  ];
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
  const text = formatUsage(usage, row?.hitPercent ?? hitPercent(usage));
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

/** Status-bar text: `step 7 · hit 98.8% │ Σ prompt 16.9k · cached 12.2k · out 319 · hit 72.4%`. */
export function statusText(current: { step: number; usage?: Usage; running: boolean; state?: string } | undefined, totals: Usage): string {
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
    `Σ prompt ${formatShort(totals.promptTokens)} · cached ${formatShort(totals.cacheHitTokens)} · out ${formatShort(totals.completionTokens)} · hit ${formatPercent(hitPercent(totals))}`,
  );
  return parts.join(" │ ");
}
