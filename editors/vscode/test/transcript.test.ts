// The transcript model, the HTML transcript and "what the model saw", on a real session log:
// `dsh demo` runs a scripted session through the real agent loop against the built-in mock, and
// `dsh usage` / `dsh saw` give the daemon's own view of the same log to compare with.

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import type { ContextMessage, SessionEvent, SessionRequestResult, SessionUsageResult } from "../src/protocol.generated";
import { renderSaw } from "../src/saw";
import { escapeHtml, renderTranscript } from "../src/render";
import { Transcript, approvalChoices } from "../src/transcript";
import { formatMoney, formatUsage, stepAnnotation, usageMarkdown } from "../src/usage";
import { DshClient } from "../src/daemon";
import { cleanup, dshBin, expectedCost } from "./support";

let root = "";
let home = "";
let sessionId = "";
const events: SessionEvent[] = [];

function dsh(...args: string[]): string {
  return execFileSync(dshBin(), ["--home", home, ...args], { encoding: "utf8" });
}

function findLog(dir: string): string {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) {
      const found = findLog(p);
      if (found) {
        return found;
      }
    } else if (e.name.endsWith(".jsonl")) {
      return p;
    }
  }
  return "";
}

/** The demo's one `instructions` note (AGENTS.md is edited between its turns). */
function instructionNote(): { seq: number; data: ContextMessage } {
  const notes = events.flatMap((e) => (e.type === "context/message" && e.data.source === "instructions" ? [{ seq: e.seq, data: e.data }] : []));
  assert.equal(notes.length, 1, "the demo logs one instructions note");
  return notes[0];
}

before(async () => {
  const out = execFileSync(dshBin(), ["demo", "--keep"], { encoding: "utf8" });
  const m = /kept (\S+?);?\s/.exec(out);
  assert.ok(m, `dsh demo printed no kept path:\n${out}`);
  root = m[1];
  home = path.join(root, "home");
  const log = findLog(home);
  sessionId = path.basename(log, ".jsonl");
  // The events as the daemon delivers them (typed, with where steering and notes joined).
  const client = await DshClient.start({ path: dshBin(), home, inProcess: true, clientName: "dsh-vscode-test" });
  try {
    for (let from = 0, end = false; !end; ) {
      const page = await client.events(sessionId, from, 1000);
      events.push(...page.events);
      ({ nextSeq: from, end } = page);
    }
  } finally {
    client.kill();
    await client.waitExit();
  }
  const lines = readFileSync(log, "utf8").split("\n").filter((l) => l.trim());
  assert.equal(events.length, lines.length, "every logged event delivered");
  lines.forEach((l, i) => assert.deepEqual({ ...events[i], joined: undefined, sessionId: undefined }, { ...JSON.parse(l), joined: undefined, sessionId: undefined }));
});

after(() => {
  // `dsh usage` and `dsh saw` start a daemon for the home on demand: stop it before removing it.
  if (home) {
    try {
      execFileSync(dshBin(), ["--home", home, "shutdown"], { encoding: "utf8", timeout: 15_000 });
    } catch {
      // None running.
    }
  }
  cleanup(root);
});

test("folds a real session log into turns, steps, tool calls and results", () => {
  const t = new Transcript(sessionId);
  t.applyAll(events);
  assert.equal(t.gaps.length, 0);
  assert.equal(t.lastSeq, events.length - 1);
  assert.equal(t.running, false);
  assert.equal(t.turns.length, 2);
  assert.equal(t.steps.size, 7);
  assert.match(t.title ?? "", /typo/);
  const s1 = t.steps.get(1)!;
  assert.equal(s1.state, "done");
  assert.equal(s1.toolCalls[0].name, "read_file");
  assert.deepEqual(JSON.parse(s1.toolCalls[0].args), { path: "src/greet.sh" });
  assert.match(s1.toolCalls[0].result!.content, /Helo/);
  assert.ok(s1.reasoning.length > 0);
  const last = t.steps.get(7)!;
  assert.match(last.text, /bye\.sh/);
  assert.equal(last.finishReason, "stop");
  // The demo edits AGENTS.md between the turns: under the default `append` policy that is a
  // logged note joining step 5's request, and the system prompt (step 5's header) holds.
  assert.deepEqual(t.steps.get(5)!.headerChanges, []);
  const notes = t.entries.filter((e) => e.kind === "context" && e.source === "instructions");
  assert.equal(notes.length, 1);
  const note = notes[0];
  assert.ok(note.kind === "context");
  assert.equal(note.headline, "AGENTS.md changed: joins the next request as a note");
  assert.equal(note.landedStep, 5);
  // The date note is not a workspace note: it keeps its plain rendering.
  const date = t.entries.find((e) => e.kind === "context" && e.source === "date");
  assert.ok(date && date.kind === "context" && date.headline === undefined);
});

test("the AGENTS.md note shows as one line where it joined, its text folded under it", () => {
  const t = new Transcript(sessionId);
  t.applyAll(events);
  const html = renderTranscript(t);
  const line = "AGENTS.md changed: joins the next request as a note";
  assert.equal(html.split(line).length - 1, 1, "the line shows exactly once");
  const at = html.indexOf(line);
  // After turn 1's steps and its end, after turn 2's prompt, before step 5: where it joined.
  assert.ok(html.indexOf(`id="step-4"`) < at && html.indexOf("Turn 1 completed") < at, "after turn 1");
  assert.ok(html.indexOf("Add a farewell script") < at, "after turn 2's prompt");
  assert.ok(at < html.indexOf(`id="step-5"`), "before step 5");
  const note = instructionNote();
  // The note is folded: a closed `details` whose summary is the line and the step it joined,
  // and whose body is exactly the text the model reads.
  const block = html.slice(html.lastIndexOf("<div", at), html.indexOf("</details>", at));
  assert.ok(block.includes(`data-seq="${note.seq}"`) && block.includes(`<details data-key="note-${note.seq}">`), block);
  assert.ok(block.includes('<span class="landed">joined step 5</span>'), block);
  assert.ok(block.includes(`<pre class="note-text">${escapeHtml(note.data.text)}</pre>`), block);
  assert.ok(note.data.text.includes("AGENTS.md now reads") || note.data.text.includes("AGENTS.md was edited"), note.data.text);
});

test("streamed chunks build the same message as assistant/message", () => {
  // Apply everything except the assembled messages: the chunks alone must give the same text.
  const streamed = new Transcript(sessionId);
  streamed.applyAll(events.map((e) => (e.type === "assistant/message" ? ({ ...e, type: "ignored" } as unknown as SessionEvent) : e)));
  const full = new Transcript(sessionId);
  full.applyAll(events);
  for (const [n, s] of full.steps) {
    const x = streamed.steps.get(n)!;
    assert.equal(x.text, s.text, `step ${n} text`);
    assert.equal(x.reasoning, s.reasoning, `step ${n} reasoning`);
    assert.deepEqual(
      x.toolCalls.map((c) => [c.id, c.name, c.args]),
      s.toolCalls.map((c) => [c.id, c.name, c.args]),
      `step ${n} tool calls`,
    );
  }
});

test("duplicates are ignored and a replay from any seq converges", () => {
  const t = new Transcript(sessionId);
  t.applyAll(events.slice(0, 100));
  t.applyAll(events.slice(50)); // overlap: 50..99 again
  assert.equal(t.gaps.length, 0);
  const ref = new Transcript(sessionId);
  ref.applyAll(events);
  assert.equal(renderTranscript(t), renderTranscript(ref));
});

test("per-step usage equals the daemon's usage table; the AGENTS.md note kept the cache", () => {
  const usage = JSON.parse(dsh("--json", "usage", sessionId)) as SessionUsageResult;
  const t = new Transcript(sessionId);
  t.applyAll(events);
  t.applyUsage(usage);
  assert.equal(usage.rows.length, t.steps.size);
  for (const row of usage.rows) {
    assert.deepEqual(t.steps.get(row.step)!.usage, row.usage, `step ${row.step}`);
  }
  assert.deepEqual(t.totals, usage.totals);
  const html = renderTranscript(t);
  for (const row of usage.rows) {
    // Every step carries its numbers in the transcript.
    const badge = formatUsage(row.usage!, row.hitPercent).split(" · ");
    const section = html.slice(html.indexOf(`id="step-${row.step}"`));
    for (const part of badge) {
      const [label, value] = part.split(" ");
      assert.ok(section.includes(`<b>${value}</b> ${label}`), `step ${row.step}: ${part}`);
    }
  }
  // The AGENTS.md edit before step 5 joined as a note: the cache held (the demo's step 5 used
  // to drop to 7.7%), so no step is colored as a drop.
  assert.deepEqual(usage.rows.filter((r) => r.dropped).map((r) => r.step), []);
  const step5 = usage.rows.find((r) => r.step === 5)!;
  assert.ok(step5.hitPercent > 90, `step 5: ${step5.hitPercent}%`);
  assert.ok(!html.includes("cache dropped:"), "no cause of a drop");
  assert.ok(!html.includes('class="usage low"'), "no drop colored low");
  assert.ok(html.includes('class="usage high"'), "cached steps are colored high");
  assert.ok(html.includes('class="usage cold"'), "the first request is cold");
});

test("every cost the editor shows is the one `dsh usage` prints and the usage at the prices used", () => {
  const usage = JSON.parse(dsh("--json", "usage", sessionId)) as SessionUsageResult;
  // The CLI's table: `turn step prompt cached new out hit% cost  cause`.
  const cli = dsh("usage", sessionId).split("\n");
  const cliCost = new Map<number, string>();
  for (const line of cli) {
    const m = /^\s*\d+\s+(\d+)\s+\d+\s+\d+\s+\d+\s+\d+\s+[\d.]+%\s+(\S+)/.exec(line);
    if (m) {
      cliCost.set(Number(m[1]), m[2]);
    }
  }
  assert.equal(cliCost.size, usage.rows.length, cli.join("\n"));
  const t = new Transcript(sessionId);
  t.applyAll(events);
  t.applyUsage(usage);
  const html = renderTranscript(t);
  const table = usageMarkdown(sessionId, usage);
  for (const row of usage.rows) {
    const used = usage.prices.find((p) => p.profile === (row.profile ?? "deepseek") && p.model === row.model);
    assert.ok(used, `the prices of step ${row.step}'s ${row.profile}/${row.model}`);
    const shown = cliCost.get(row.step)!;
    assert.equal(formatMoney(expectedCost(row.usage!, used.price).amount, used.price.currency), shown, `step ${row.step}`);
    const section = html.slice(html.indexOf(`id="step-${row.step}"`));
    assert.ok(section.slice(0, section.indexOf("</section>")).includes(`<b>${shown}</b> cost`), `step ${row.step}: ${shown} in the transcript`);
    assert.ok(stepAnnotation(row.usage, row).includes(` · cost ${shown}`), stepAnnotation(row.usage, row));
    assert.ok(table.split("\n").some((l) => l.startsWith(`| ${row.turn} | ${row.step} |`) && l.includes(`| ${shown} |`)), `step ${row.step} in the table`);
  }
  // The session's line, word for word as the CLI prints it, and its prices.
  const costLine = cli.find((l) => l.startsWith("cost "));
  assert.ok(costLine && table.includes(costLine), `${costLine} in\n${table}`);
  for (const line of cli.filter((l) => l.startsWith("prices of "))) {
    assert.ok(table.includes(line), line);
  }
  const total = /^\s+total\s+.*%\s+(\S+)$/m.exec(cli.join("\n"))![1];
  const header = html.slice(0, html.indexOf("</header>"));
  assert.ok(header.includes(`<b>${total}</b> cost`), `${total} in ${header}`);
});

test("what the model saw renders header, system prompt, tools, messages with seqs and the wire body", () => {
  const r = JSON.parse(dsh("--json", "saw", sessionId, "--step", "5")) as SessionRequestResult;
  const text = renderSaw(r, { sessionId });
  assert.match(text, /step 5 \(turn 2\)/);
  assert.match(text, new RegExp(`sha256 ${r.wire.sha256}`));
  assert.match(text, /matches the rebuilt body byte for byte/);
  assert.match(text, /## System prompt \(\d+ lines\)/);
  assert.match(text, /### read_file/);
  for (const m of r.messages) {
    assert.ok(text.includes(`[seq ${m.seq}] ${m.message.role}`), `message seq ${m.seq}`);
  }
  assert.ok(text.includes(r.wire.body), "the exact wire body");
  // Two steps' documents diff line by line: the system prompt is the same; the AGENTS.md note
  // is among the added lines, at its seq, as the transcript folds it.
  const prev = renderSaw(JSON.parse(dsh("--json", "saw", sessionId, "--step", "4")) as SessionRequestResult, { sessionId, wireBody: false });
  const cur = renderSaw(r, { sessionId, wireBody: false }).split("\n");
  const added = cur.filter((l) => !prev.split("\n").includes(l));
  assert.ok(!added.some((l) => l.startsWith("  | ")), "no system-prompt line changed");
  const note = instructionNote();
  assert.ok(added.includes(`[seq ${note.seq}] user`), "the note is a message of step 5's request");
  for (const l of note.data.text.split("\n")) {
    assert.ok(cur.includes(`    ${l}`), `the note's line ${JSON.stringify(l)} in what the model saw`);
  }
});

test("the demo's commands ran confined; a confined command's approval offers an unconfined run", () => {
  const t = new Transcript(sessionId);
  for (const e of events) {
    t.apply(e);
  }
  const commands = [...t.steps.values()].flatMap((s) => s.toolCalls).filter((c) => c.name === "run_command");
  assert.ok(commands.length > 0);
  assert.ok(commands.every((c) => c.started && c.unconfined === false), "no demo command ran unconfined");
  assert.doesNotMatch(renderTranscript(t), /class="unconfined"/);
  const labels = (sandbox?: string) => approvalChoices({ sandbox }).map((c) => c.label);
  assert.deepEqual(labels(), ["Allow", "Deny", "Allow always"]);
  assert.deepEqual(labels("full (unconfined)"), ["Allow", "Deny", "Allow always"]);
  assert.deepEqual(labels("workspace-write"), ["Allow", "Deny", "Allow always", "Allow once, unconfined"]);
});
