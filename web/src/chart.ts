// The chart of every step, from `session/usage`: a bar per step (its prompt tokens, the cached
// part drawn over the new part), output tokens and the running cost as lines, every cache drop
// marked and labelled with its logged cause, compactions and header changes as dashed lines.
// One SVG path per series, whatever the number of steps: 2,000 steps are a few paths, not
// thousands of nodes.

import type { PrefixCause, SessionUsageResult, UsageEntry } from "../../editors/vscode/src/protocol.generated";

const SVG = "http://www.w3.org/2000/svg";
const HEIGHT = 200;
const TOP = 14;
const BOTTOM = 18;
const LEFT = 52;
const RIGHT = 70;

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attributes: Record<string, string | number>): SVGElementTagNameMap[K] {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) {
    element.setAttribute(name, String(value));
  }
  return element;
}

/** What a cause marks on the chart, in words. */
export function causeLabel(cause: PrefixCause): string {
  switch (cause.kind) {
    case "firstRequest":
      return "first request";
    case "resume":
      return cause.changed ? "resumed, header changed" : "resumed";
    case "fallback":
      return "fallback";
    case "systemChanged":
      return cause.foldedInstructions ? "system prompt changed (instructions folded)" : "system prompt changed";
    case "toolsChanged":
      return "tools changed";
    case "configChanged":
      return "config changed";
    case "providerChanged":
      return `provider ${cause.from} → ${cause.to}`;
    case "compaction":
      return "compaction";
    case "trim":
      return "trim";
    default:
      return "prefix changed";
  }
}

/** Whether a cause is drawn as a marker line (a compaction or a header change). */
function isMarker(cause: PrefixCause): boolean {
  return ["compaction", "systemChanged", "toolsChanged", "configChanged", "providerChanged", "trim"].includes(cause.kind);
}

function compact(tokens: number): string {
  if (tokens >= 1_000_000) {
    return `${(tokens / 1_000_000).toFixed(1)}M`;
  }
  if (tokens >= 1000) {
    return `${(tokens / 1000).toFixed(tokens >= 10_000 ? 0 : 1)}k`;
  }
  return String(tokens);
}

export type ChartOptions = {
  /** A step was picked (click, arrow keys). */
  onSelect: (row: UsageEntry, index: number) => void;
  /** A step was opened (Enter, double click). */
  onOpen: (row: UsageEntry) => void;
};

/** The chart of one session; `update` redraws it from a fresh `session/usage`. */
export class StepChart {
  readonly element: HTMLElement;
  private readonly picture: SVGSVGElement;
  private readonly caption: HTMLElement;
  private rows: UsageEntry[] = [];
  private selected = -1;
  private width = 800;

  constructor(private readonly options: ChartOptions) {
    this.element = document.createElement("figure");
    this.element.className = "chart";
    this.picture = svg("svg", { role: "img", "aria-label": "prompt tokens per step" });
    this.picture.setAttribute("tabindex", "0");
    this.picture.setAttribute("data-testid", "chart");
    this.caption = document.createElement("figcaption");
    this.caption.setAttribute("aria-live", "polite");
    this.element.append(this.picture, this.caption);
    this.picture.addEventListener("click", (event) => this.pick(this.indexAt(event.clientX)));
    this.picture.addEventListener("dblclick", () => this.open());
    this.picture.addEventListener("keydown", (event) => this.key(event));
  }

  update(usage: SessionUsageResult): void {
    this.rows = usage.rows;
    this.width = Math.max(320, this.element.clientWidth || 800);
    this.draw(usage);
    if (this.selected >= this.rows.length) {
      this.selected = this.rows.length - 1;
    }
    this.describe();
  }

  /** Selects the step `step` (when the transcript or the "what the model saw" panel picks it). */
  select(step: number): void {
    const index = this.rows.findIndex((row) => row.step === step);
    if (index >= 0) {
      this.selected = index;
      this.drawSelection();
      this.describe();
    }
  }

  private key(event: KeyboardEvent): void {
    const moves: Record<string, number> = { ArrowLeft: -1, ArrowRight: 1, PageUp: -10, PageDown: 10 };
    if (event.key in moves) {
      event.preventDefault();
      const from = this.selected < 0 ? this.rows.length : this.selected;
      this.pick(Math.max(0, Math.min(this.rows.length - 1, from + (moves[event.key] ?? 0))));
    } else if (event.key === "Home" || event.key === "End") {
      event.preventDefault();
      this.pick(event.key === "Home" ? 0 : this.rows.length - 1);
    } else if (event.key === "Enter") {
      event.preventDefault();
      this.open();
    }
  }

  private open(): void {
    const row = this.rows[this.selected];
    if (row) {
      this.options.onOpen(row);
    }
  }

  private pick(index: number): void {
    const row = this.rows[index];
    if (!row) {
      return;
    }
    this.selected = index;
    this.drawSelection();
    this.describe();
    this.options.onSelect(row, index);
  }

  private indexAt(clientX: number): number {
    const box = this.picture.getBoundingClientRect();
    const x = ((clientX - box.left) / box.width) * this.width - LEFT;
    const step = (this.width - LEFT - RIGHT) / Math.max(1, this.rows.length);
    return Math.floor(x / step);
  }

  private describe(): void {
    const row = this.rows[this.selected];
    if (!row) {
      this.caption.textContent = this.rows.length
        ? `${this.rows.length} steps · click a bar or use ←/→ to pick a step, Enter to see what the model saw`
        : "no steps yet";
      return;
    }
    const usage = row.usage;
    const tokens = usage
      ? `prompt ${usage.promptTokens} (cached ${usage.cacheHitTokens}, new ${usage.cacheMissTokens}) · output ${usage.completionTokens}`
      : "did not finish";
    const cost = row.cost ? ` · ${row.cost.amount.toFixed(4)} ${row.cost.currency}` : "";
    const drop = row.dropped ? ` · cache dropped: ${row.explanation}` : "";
    this.caption.textContent = `step ${row.step} (turn ${row.turn}) · ${tokens}${cost}${drop}`;
  }

  private draw(usage: SessionUsageResult): void {
    const rows = this.rows;
    const width = this.width;
    const picture = this.picture;
    picture.replaceChildren();
    picture.setAttribute("viewBox", `0 0 ${width} ${HEIGHT}`);
    picture.setAttribute("data-steps", String(rows.length));
    const plot = width - LEFT - RIGHT;
    const slot = plot / Math.max(1, rows.length);
    const bar = Math.max(0.5, slot * (slot > 3 ? 0.8 : 1));
    const maxPrompt = Math.max(1, ...rows.map((row) => row.usage?.promptTokens ?? 0));
    const maxOutput = Math.max(1, ...rows.map((row) => row.usage?.completionTokens ?? 0));
    const base = HEIGHT - BOTTOM;
    const span = base - TOP;
    const y = (tokens: number) => base - (tokens / maxPrompt) * span;

    let prompt = "";
    let cached = "";
    let output = "";
    let cost = "";
    let markers = "";
    let spent = 0;
    const totalCost = rows.reduce((sum, row) => sum + (row.cost?.amount ?? 0), 0) || 1;
    const drops: { x: number; row: UsageEntry }[] = [];
    rows.forEach((row, index) => {
      const x = LEFT + index * slot;
      const usage = row.usage;
      if (usage) {
        // Every step gets its bar, even an empty one (one subpath per step).
        const top = Math.min(y(usage.promptTokens), base - 0.5);
        prompt += `M${x.toFixed(2)} ${top.toFixed(2)}h${bar.toFixed(2)}V${base}h${(-bar).toFixed(2)}z`;
        if (usage.cacheHitTokens > 0) {
          cached += `M${x.toFixed(2)} ${y(usage.cacheHitTokens).toFixed(2)}h${bar.toFixed(2)}V${base}h${(-bar).toFixed(2)}z`;
        }
        const oy = base - (usage.completionTokens / maxOutput) * span * 0.5;
        output += `${output ? "L" : "M"}${(x + bar / 2).toFixed(2)} ${oy.toFixed(2)}`;
      } else {
        prompt += `M${x.toFixed(2)} ${(base - 2).toFixed(2)}h${bar.toFixed(2)}V${base}h${(-bar).toFixed(2)}z`;
      }
      spent += row.cost?.amount ?? 0;
      const cy = base - (spent / totalCost) * span;
      cost += `${cost ? "L" : "M"}${(x + bar / 2).toFixed(2)} ${cy.toFixed(2)}`;
      if (row.causes.some(isMarker)) {
        markers += `M${(x - 0.5).toFixed(2)} ${TOP}V${base}`;
      }
      if (row.dropped) {
        drops.push({ x: x + bar / 2, row });
      }
    });

    // Axes and scale.
    const axis = svg("g", { class: "axis" });
    axis.append(svg("path", { d: `M${LEFT} ${TOP}V${base}H${width - RIGHT}` }));
    for (const fraction of [0.5, 1]) {
      const label = svg("text", { x: LEFT - 4, y: base - fraction * span + 4, "text-anchor": "end" });
      label.textContent = compact(Math.round(maxPrompt * fraction));
      axis.append(label);
    }
    const costLabel = svg("text", { x: width - RIGHT + 4, y: TOP + 4 });
    costLabel.textContent = usage.cost ? `${usage.cost.amount.toFixed(3)} ${usage.cost.currency}` : "cost ?";
    axis.append(costLabel);
    const first = svg("text", { x: LEFT, y: HEIGHT - 4 });
    first.textContent = rows.length ? `step ${rows[0]?.step}` : "";
    const last = svg("text", { x: width - RIGHT, y: HEIGHT - 4, "text-anchor": "end" });
    last.textContent = rows.length ? `step ${rows[rows.length - 1]?.step}` : "";
    axis.append(first, last);
    picture.append(axis);

    picture.append(
      svg("path", { class: "series-new", d: prompt || "M0 0", "data-series": "prompt" }),
      svg("path", { class: "series-cached", d: cached || "M0 0", "data-series": "cached" }),
      svg("path", { class: "series-markers", d: markers || "M0 0", "data-series": "markers" }),
      svg("path", { class: "series-output", d: output || "M0 0", "data-series": "output", fill: "none" }),
      svg("path", { class: "series-cost", d: cost || "M0 0", "data-series": "cost", fill: "none" }),
    );

    // Drops: one path of markers (a long session may drop at many steps), and a label with the
    // logged cause for those that have room (at most one per 90 px), so text never piles up.
    // The caption names the cause of any step picked.
    const dropGroup = svg("g", { class: "drops" });
    const marks = drops.map(({ x }) => `M${x.toFixed(2)} ${TOP}l-4 -7h8z`).join("");
    const markPath = svg("path", { class: "drop", d: marks || "M0 0", "data-series": "drops", "data-steps": drops.map(({ row }) => row.step).join(" ") });
    dropGroup.append(markPath);
    // Labels where they fit without overlapping (text about 5.5 px a character): the drops
    // with a logged cause first, then those without one.
    const taken: [number, number][] = [];
    const byCause = [...drops].sort((a, b) => Number(b.row.causes.length > 0) - Number(a.row.causes.length > 0));
    for (const { x, row } of byCause) {
      if (row.causes.some((cause) => cause.kind === "firstRequest")) {
        continue;
      }
      const text = row.causes.length ? row.causes.map(causeLabel).join(", ") : "drop, no logged cause";
      const start = x + 2;
      const end = start + text.length * 5.5;
      if (end > width || taken.some(([from, to]) => start < to + 6 && end > from - 6)) {
        continue;
      }
      taken.push([start, end]);
      const label = svg("text", { class: "drop-label", x: start, y: TOP + 10, "data-step": row.step });
      label.textContent = text;
      const title = svg("title", {});
      title.textContent = `step ${row.step}: cache dropped — ${row.explanation}`;
      label.append(title);
      dropGroup.append(label);
    }
    picture.append(dropGroup);
    // The picked step: a mark under its bar (not over it, so its colours stay readable).
    picture.append(svg("rect", { class: "selection", x: 0, y: base + 1, width: 0, height: 4 }));
    this.drawSelection();

    const legend = document.createElement("div");
    legend.className = "legend";
    for (const [name, label] of [
      ["cached", "cached prompt"],
      ["new", "new prompt"],
      ["output", "output"],
      ["cost", "cost (running)"],
      ["drop", "cache drop"],
      ["markers", "compaction / header change"],
    ]) {
      const item = document.createElement("span");
      item.className = `key key-${name}`;
      item.textContent = label ?? "";
      legend.append(item);
    }
    this.element.querySelector(".legend")?.remove();
    this.element.insertBefore(legend, this.caption);
  }

  private drawSelection(): void {
    const rect = this.picture.querySelector<SVGRectElement>(".selection");
    if (!rect) {
      return;
    }
    const slot = (this.width - LEFT - RIGHT) / Math.max(1, this.rows.length);
    if (this.selected < 0) {
      rect.setAttribute("width", "0");
      return;
    }
    rect.setAttribute("x", String(LEFT + this.selected * slot));
    rect.setAttribute("width", String(Math.max(2, slot * (slot > 3 ? 0.8 : 1))));
  }
}
