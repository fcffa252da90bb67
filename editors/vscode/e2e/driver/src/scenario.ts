// The end-to-end scenario, run inside a real VS Code (code-server started by `e2e/run.mjs`) by
// the test-only driver extension (`extension.ts`). It drives the packaged dsh extension from
// outside, through its `dsh.*` commands, against the real daemon and the scripted mock provider;
// it checks what the views show through the test API the extension's `activate()` returns
// (`DshTestApi`) and what the editor holds, and writes the results to a JSON file the harness
// reads. The one step a person does — clicking "Allow" on the approval notification — the harness
// does in the browser.
//
// From the extension's sources it takes only node-only modules (the transcript model, to replay a
// session after the daemon restart, and the usage formatting the views must match) and types.

import { createHash } from "node:crypto";
import { existsSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import * as vscode from "vscode";
import type { DshTestApi } from "../../../src/extension";
import type { SessionPromptResult, SessionSummary, SessionUsageResult } from "../../../src/protocol.generated";
import { formatBytes, imageFileName } from "../../../src/images";
import { Transcript } from "../../../src/transcript";
import { formatMoney, formatUsage, hitPercent, usageParts } from "../../../src/usage";
import type { RewindOutcome } from "../../../src/rewind";
import type { TreeNode } from "../../../src/views";

type Check = { name: string; ok: boolean; detail: string; ms: number };

/** The line the transcript shows for the scenario's AGENTS.md edit (the harness looks for it too). */
const NOTE_LINE = "AGENTS.md changed: joins the next request as a note";

export type Results = {
  started: string;
  checks: Check[];
  done: boolean;
  passed: number;
  failed: number;
  /** What the harness checks in the page and shows in the screenshot. */
  expect?: { sessionId: string; usage: SessionUsageResult; statusText: string };
  /** Text of an error notification the harness must have seen. */
  expectToast?: string;
  /** The plan's headline the transcript's header must show in the page. */
  expectPlan?: string;
  /** A sub-agent the parent's transcript names: the harness clicks its line's button in the page. */
  expectChild?: { parentId: string; childId: string };
  /** A picture in a transcript: the harness checks it in the page, clicks it, then writes
   * `<results>.image-checked` for the scenario to go on. */
  expectImage?: { sessionId: string; sha256: string; name: string; size: string };
  /** Text of the daemon's refusal of a picture the harness must have seen in a notification. */
  expectImageRefusal?: string;
  phase?: string;
};

type ScriptStep = { reasoning?: string; content?: string; tool_calls?: Array<{ name: string; arguments: unknown }>; delay_ms?: number };

export type ScenarioOptions = {
  /** The results file the harness polls (written after every check). */
  resultPath: string;
  /** The mock provider's URL, for scripting its responses. */
  mockUrl: string;
  /** A PNG to attach to a prompt (the harness knows its size in pixels). */
  imagePath: string;
  log: (line: string) => void;
};

export function newResults(): Results {
  return { started: new Date().toISOString(), checks: [], done: false, passed: 0, failed: 0 };
}

/** Atomically: the harness never reads half a file. */
export function writeResults(resultPath: string, results: Results): void {
  if (!resultPath) {
    return;
  }
  writeFileSync(resultPath + ".tmp", JSON.stringify(results, null, 2));
  renameSync(resultPath + ".tmp", resultPath);
}

export async function runScenario(api: DshTestApi, o: ScenarioOptions): Promise<Results> {
  const results = newResults();
  const write = () => writeResults(o.resultPath, results);
  const phase = (p: string) => {
    results.phase = p;
    write();
  };
  const check = async (name: string, fn: () => Promise<string | void>): Promise<boolean> => {
    const start = Date.now();
    phase(name);
    try {
      const detail = (await fn()) ?? "";
      results.checks.push({ name, ok: true, detail, ms: Date.now() - start });
      results.passed++;
      return true;
    } catch (e) {
      results.checks.push({ name, ok: false, detail: e instanceof Error ? (e.stack ?? e.message) : String(e), ms: Date.now() - start });
      results.failed++;
      o.log(`${name} failed: ${String(e)}`);
      return false;
    } finally {
      write();
    }
  };

  const script = async (steps: ScriptStep[]) => {
    const r = await fetch(`${o.mockUrl}/_fake/script`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(steps) });
    if (!r.ok) {
      throw new Error(`POST /_fake/script: ${r.status} ${await r.text()}`);
    }
  };
  const ws = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? "";
  /** The transcript panel's last HTML: what the user sees. */
  const html = (sessionId: string) => api.transcriptHtml(sessionId) ?? "";
  let id = "";
  let t: Transcript | undefined;
  let steerSeq = -1;
  let usage: SessionUsageResult | undefined;
  let forkId = "";
  const streamed: Array<{ step: number; text: number; reasoning: number }> = [];
  const disposables: vscode.Disposable[] = [];

  await check("a missing binary is reported with the path tried and the setting to change", async () => {
    const cfg = vscode.workspace.getConfiguration("dsh");
    const original = cfg.inspect<string>("path")?.globalValue;
    const missing = "/nonexistent/dsh-missing";
    await cfg.update("path", missing, vscode.ConfigurationTarget.Global);
    let error: unknown;
    try {
      await api.client();
    } catch (e) {
      error = e;
    } finally {
      await cfg.update("path", original, vscode.ConfigurationTarget.Global);
    }
    // The extension's DshStartError (its class is not this module's copy: matched by name).
    assert(error instanceof Error && error.name === "DshStartError" && (error as Error & { kind?: string }).kind === "missing", `expected a missing-binary error, got ${String(error)}`);
    assert(error.message.includes(missing) && error.message.includes("dsh.path"), error.message);
    results.expectToast = `dsh binary not found: tried "${missing}"`;
    return error.message;
  });

  await check("connect to the daemon (dsh stdio)", async () => {
    const c = await api.client();
    return `${c.info.serverInfo.name} ${c.info.serverInfo.version}, protocol ${c.info.protocolVersion}`;
  });

  await check("create a session and open its transcript", async () => {
    id = (await vscode.commands.executeCommand<string>("dsh.newSession")) ?? "";
    assert(id, "dsh.newSession returned no id");
    t = api.transcript(id);
    assert(t, "no transcript");
    assert(api.transcriptHtml(id) !== undefined, "no transcript panel");
    return id;
  });
  if (!t) {
    return finish();
  }
  const tr = t;

  // Turn 1: read (slow: we steer during it), write (asks for approval), answer.
  let turn1: Thenable<SessionPromptResult | undefined> | undefined;
  await check("prompt; the answer streams into the transcript", async () => {
    await script([
      { reasoning: "The user wants the typo fixed. I'll read the script first.", tool_calls: [{ name: "read_file", arguments: { path: "src/greet.sh" } }], delay_ms: 2500 },
      {
        reasoning: "It says Helo. I'll write the fixed script, keeping the exclamation mark as asked.",
        tool_calls: [{ name: "write_file", arguments: { path: "src/greet.sh", content: '#!/bin/sh\necho "Hello, $1!"\n' } }],
      },
      { reasoning: "The file is fixed.", content: 'Fixed the greeting in `src/greet.sh`: "Helo" → "Hello", and the exclamation mark stays.' },
    ]);
    // Watch the answer grow: every chunk is folded (and rendered) as it arrives.
    const seen = streamed;
    const watch = api.onDidChange((c) => {
      const step = c.sessionId === id && c.step !== undefined ? tr.steps.get(c.step) : undefined;
      if (step && step.state === "running") {
        seen.push({ step: step.step, text: step.text.length, reasoning: step.reasoning.length });
      }
    });
    disposables.push(watch);
    turn1 = vscode.commands.executeCommand<SessionPromptResult | undefined>("dsh.prompt", { sessionId: id, text: "The greeting in src/greet.sh has a typo. Fix it." });
    await until(() => tr.steps.get(1)?.state === "running", "step 1 to start", 15_000);
  });

  await check("steer mid-turn; the transcript shows the step it landed in", async () => {
    assert(tr.steps.get(1)?.state === "running", "step 1 is no longer running: too late to steer");
    const r = await vscode.commands.executeCommand<{ seq: number }>("dsh.steer", { sessionId: id, text: "Keep the exclamation mark." });
    assert(r && r.seq > 0, "dsh.steer returned no seq");
    steerSeq = r.seq;
    await until(() => tr.steps.get(2) !== undefined, "step 2", 20_000);
    const entry = tr.entries.find((e) => e.kind === "steering" && e.seq === steerSeq);
    assert(entry && entry.kind === "steering" && entry.landedStep === 2, `steering landed in ${entry && entry.kind === "steering" ? entry.landedStep : "?"}`);
    await until(() => html(id).includes("landed in step 2"), "the transcript to show 'landed in step 2'", 5000);
    return `steering at seq ${steerSeq} landed in step 2`;
  });

  await check("approve a write with the native prompt (Allow clicked in the page)", async () => {
    phase("waiting-for-approval");
    await until(() => [...tr.steps.values()].some((s) => s.toolCalls.some((c) => c.approval !== undefined)), "approval/request", 20_000);
    await until(() => [...tr.steps.values()].some((s) => s.toolCalls.some((c) => c.approval?.decision !== undefined)), "the approval decision (click Allow)", 60_000);
    const call = [...tr.steps.values()].flatMap((s) => s.toolCalls).find((c) => c.approval)!;
    assert(call.approval!.decision === "allow", `decision ${call.approval!.decision}`);
    assert(api.approvalAnswer(call.approval!.approvalId) === "allow", "the answer did not come from the notification's Allow button");
    await until(() => call.result !== undefined, "the write's result", 10_000);
    assert(!call.result!.isError, `write failed: ${call.result!.content}`);
    const text = readFileSync(path.join(ws, "src/greet.sh"), "utf8");
    assert(text.includes("Hello, $1!"), `src/greet.sh is ${JSON.stringify(text)}`);
    return call.approval!.summary;
  });

  await check("the turn completes with the streamed answer", async () => {
    const r = await withTimeout(Promise.resolve(turn1!), 30_000, "turn 1");
    assert(r && "stopReason" in r && r.stopReason === "completed", `turn 1: ${JSON.stringify(r)}`);
    const text = tr.steps.get(3)!.text;
    assert(text.includes("Fixed the greeting"), `step 3 text ${JSON.stringify(text)}`);
    await until(() => html(id).includes("Fixed the greeting"), "the answer in the transcript", 5000);
    for (const d of disposables.splice(0)) {
      d.dispose();
    }
    const partial = streamed.filter((x) => x.step === 3 && x.text > 0 && x.text < text.length);
    assert(partial.length >= 2, `the answer did not grow in pieces: ${JSON.stringify(streamed.filter((x) => x.step === 3))}`);
    const reasoning = streamed.filter((x) => x.step === 3 && x.reasoning > 0 && x.text === 0);
    assert(reasoning.length >= 1, "the reasoning did not stream before the answer");
    return `${r.steps} steps; the answer was shown at ${partial.length} partial lengths before its ${text.length} characters`;
  });

  // Turn 2 after an edit of AGENTS.md: under the default `append` policy the edit joins step 4's
  // request as a logged note; the system prompt, and the cache, hold.
  await check("an edited AGENTS.md joins the next request as a note: one line before the step it joined, the cache holds", async () => {
    const agents = path.join(ws, "AGENTS.md");
    writeFileSync(agents, readFileSync(agents, "utf8") + "Every script takes the name to greet as $1.\n");
    await script([{ reasoning: "Same style as greet.sh.", content: "`src/greet.sh` already takes the name as `$1`; nothing else to change." }]);
    const r = await vscode.commands.executeCommand<SessionPromptResult>("dsh.prompt", { sessionId: id, text: "Does the script take the name as $1?" });
    assert(r && r.stopReason === "completed", `turn 2: ${JSON.stringify(r)}`);
    const note = tr.entries.find((e) => e.kind === "context" && e.source === "instructions");
    assert(note && note.kind === "context" && note.landedStep === 4, `the note joined step ${note && note.kind === "context" ? note.landedStep : "?"}`);
    assert(note.text.includes("Every script takes the name to greet as $1."), note.text);
    await until(() => html(id).includes(NOTE_LINE) && html(id).includes(`id="step-4"`), "the note's line in the transcript", 5000);
    const page = html(id);
    assert(page.split(NOTE_LINE).length === 2, "the note's line shows more than once");
    const at = page.indexOf(NOTE_LINE);
    assert(page.indexOf("Turn 1 completed") < at && at < page.indexOf(`id="step-4"`), "the note's line is not between turn 1's end and step 4");
    await until(() => tr.steps.get(4)?.row !== undefined, "the usage row of step 4", 5000);
    const row = tr.steps.get(4)!.row!;
    assert(!row.dropped && row.hitPercent > 50, `step 4 lost the cache: ${JSON.stringify(row)}`);
    return `seq ${note.seq} joined step 4; step 4 hit ${row.hitPercent.toFixed(1)}%`;
  });

  await check("per-step usage and cost in the transcript, the tree and the status bar equal session/usage", async () => {
    usage = await (await api.client()).usage(id);
    const u = usage;
    await until(() => [...tr.steps.values()].every((s) => s.row !== undefined) && tr.sessionCost !== undefined, "usage rows", 5000);
    // Each step's cost, computed here from its usage and the prices the daemon says it used.
    const costOf = (row: (typeof u.rows)[number]) => {
      const used = u.prices.find((p) => p.profile === (row.profile ?? "deepseek") && p.model === row.model);
      assert(used && row.usage, `no prices for step ${row.step}: ${JSON.stringify(u.prices)}`);
      const x = row.usage;
      const p = used.price;
      const amount = (x.cacheHitTokens * p.cacheHit + (x.promptTokens - x.cacheHitTokens) * p.cacheMiss + x.completionTokens * p.output) / 1_000_000;
      return { amount, text: formatMoney(amount, p.currency) };
    };
    // The panel redraws after the extension applied the same session/usage answer.
    const shows = (page: string, row: (typeof u.rows)[number]) => {
      const section = page.slice(page.indexOf(`id="step-${row.step}"`));
      return row.usage !== undefined && usageParts(row.usage, row.hitPercent, row.cost).every((p) => section.includes(`<b>${p.value}</b> ${p.label}`));
    };
    await until(() => u.rows.every((row) => shows(html(id), row)), "every step's usage from session/usage in the transcript", 5000).catch(() => undefined);
    const page = html(id);
    let total = 0;
    for (const row of usage.rows) {
      assert(row.usage, `step ${row.step} has no usage`);
      const cost = costOf(row);
      total += cost.amount;
      assert(row.cost && row.cost.currency === usage.prices[0].price.currency, `step ${row.step} has no cost`);
      const section = page.slice(page.indexOf(`id="step-${row.step}"`));
      for (const p of usageParts(row.usage, row.hitPercent, row.cost)) {
        assert(section.includes(`<b>${p.value}</b> ${p.label}`), `step ${row.step}: ${p.label} ${p.value} not in the transcript`);
      }
      assert(section.includes(`<b>${cost.text}</b> cost`), `step ${row.step}: cost ${cost.text} not in the transcript`);
    }
    const totalText = formatMoney(total, usage.prices[0].price.currency);
    // The session runs on the default profile at the mock's URL (`dsh.baseUrl`), pinned: the
    // ad-hoc profile `deepseek@URL`, named so wherever a profile is shown.
    const baseUrl = String(vscode.workspace.getConfiguration("dsh").get("baseUrl") ?? "").replace(/\/+$/, "");
    const profile = usage.prices[0].profile;
    assert(profile === `deepseek@${baseUrl}`, `the session's profile ${profile}, want deepseek@${baseUrl}`);
    assert(page.slice(0, page.indexOf("</header>")).includes(`<b>${totalText}</b> cost`), `the session's cost ${totalText} is not in the transcript's header`);
    // The tree: session → turn → step, each step's usage and cost as its description; the
    // session's total cost and its profile/model on the session.
    const roots = await api.tree.getChildren();
    const root = roots.find((n) => n.kind === "session" && n.summary.sessionId === id);
    assert(root, "the session is not in the tree");
    const rootText = String(api.tree.getTreeItem(root).description);
    assert(rootText.includes(` · ${totalText}`) && rootText.includes(`${profile}/deepseek-v4-flash`), `tree session: ${rootText} lacks ${totalText} or ${profile}/deepseek-v4-flash`);
    const turns = await api.tree.getChildren(root);
    assert(turns.length === 2, `${turns.length} turns in the tree`);
    let seen = 0;
    for (const turn of turns) {
      for (const stepNode of await api.tree.getChildren(turn)) {
        const item = api.tree.getTreeItem(stepNode);
        const row = usage.rows.find((r) => stepNode.kind === "step" && r.step === stepNode.step.step)!;
        const want = `${formatUsage(row.usage!, row.hitPercent)} · cost ${costOf(row).text}`;
        assert(item.description === want, `tree step ${row.step}: ${String(item.description)}, want ${want}`);
        seen++;
      }
    }
    assert(seen === usage.rows.length, `${seen} steps in the tree`);
    const st = api.statusText();
    const totalHit = `hit ${hitPercent(usage.totals).toFixed(1)}%`;
    assert(st.includes(totalHit), `status bar ${st} lacks ${totalHit}`);
    assert(st.endsWith(` · ${totalText}`), `status bar ${st} lacks the cost ${totalText}`);
    // The usage table document.
    const doc = await documentText((await vscode.commands.executeCommand<string>("dsh.showUsage", { sessionId: id }))!);
    for (const row of usage.rows) {
      assert(doc.split("\n").some((l) => l.startsWith(`| ${row.turn} | ${row.step} |`) && l.includes(`| ${costOf(row).text} |`)), `usage table step ${row.step}`);
    }
    assert(doc.includes(`cost ${totalText} · the cache saved `) && doc.includes(`prices of ${profile}/deepseek-v4-flash per million tokens`), doc);
    results.expect = { sessionId: id, usage, statusText: st };
    return `${usage.rows.length} steps, ${totalText}; status bar: ${st}`;
  });

  await check("cancel a running turn", async () => {
    await script([{ reasoning: "This will take a while.", content: "never shown", delay_ms: 30_000 }]);
    const running = vscode.commands.executeCommand<SessionPromptResult>("dsh.prompt", { sessionId: id, text: "Now rewrite everything in Rust." });
    await until(() => tr.running && tr.lastStep?.state === "running" && tr.lastStep.step === 5, "step 5 to start", 15_000);
    const c = await vscode.commands.executeCommand<{ cancelled: boolean }>("dsh.cancel", { sessionId: id });
    assert(c?.cancelled === true, `cancel: ${JSON.stringify(c)}`);
    const r = await withTimeout(Promise.resolve(running), 15_000, "the cancelled turn");
    assert(r?.stopReason === "cancelled", `turn 3: ${JSON.stringify(r)}`);
    await until(() => !tr.running, "turn/end", 5000);
    assert(tr.steps.get(5)!.state === "cancelled", `step 5 is ${tr.steps.get(5)!.state}`);
    await until(() => /Turn 3 cancelled/.test(html(id)), "'Turn 3 cancelled' in the transcript", 5000);
  });

  await check("fork at step 2 opens the fork as a new session", async () => {
    const step2 = tr.steps.get(2)!;
    forkId = (await vscode.commands.executeCommand<string>("dsh.fork", { sessionId: id, step: 2 })) ?? "";
    assert(forkId && forkId !== id, `fork id ${forkId}`);
    const f = api.transcript(forkId);
    assert(f, "the fork is not open");
    await until(() => f.lastSeq >= step2.seq - 1, "the fork's events", 10_000);
    assert(f.forkedFrom?.sessionId === id && f.forkedFrom.seq === step2.seq, `forkedFrom ${JSON.stringify(f.forkedFrom)}`);
    assert(f.steps.size === 1, `the fork has ${f.steps.size} steps`);
    assert(api.transcriptHtml(forkId) !== undefined, "no panel for the fork");
    return `${forkId} (before seq ${step2.seq})`;
  });

  await check("what the model saw at step 2 (read-only virtual document)", async () => {
    const uri = await vscode.commands.executeCommand<string>("dsh.whatTheModelSaw", { sessionId: id, step: 2 });
    assert(uri, "no document");
    const text = await documentText(uri);
    const c = await api.client();
    const r = await c.request(id, 2);
    for (const needle of [`step 2 (turn 1)`, `sha256 ${r.wire.sha256}`, "## System prompt", "## Tools", "### write_file", `[seq ${steerSeq}] user`, "Keep the exclamation mark.", "matches the rebuilt body byte for byte"]) {
      assert(text.includes(needle), `missing ${JSON.stringify(needle)}`);
    }
    const editor = vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === uri);
    assert(editor, "the document is not shown");
    return `${uri} · ${text.split("\n").length} lines`;
  });

  await check("the step diff opens in the native diff view", async () => {
    const uris = await vscode.commands.executeCommand<string[]>("dsh.diffStep", { sessionId: id, step: 4 });
    assert(uris && uris.length === 2, "no diff");
    await until(
      () =>
        vscode.window.tabGroups.all.some((g) =>
          g.tabs.some((tab) => tab.input instanceof vscode.TabInputTextDiff && tab.input.original.toString() === uris[0] && tab.input.modified.toString() === uris[1]),
        ),
      "a diff tab",
      10_000,
    );
    const left = await documentText(uris[0]);
    const right = await documentText(uris[1]);
    assert(left && right && left !== right, "the two documents");
    assert(right.includes("Every script takes the name to greet as $1.") && !left.includes("Every script takes the name to greet as $1."), "the system prompt change is not in the diff");
    return uris.join(" ↔ ");
  });

  await check("compact the session; the transcript shows the compaction", async () => {
    const r = await vscode.commands.executeCommand<{ compacted: boolean; seq?: number; message: string }>("dsh.compact", { sessionId: id });
    assert(r && r.compacted, `compact: ${JSON.stringify(r)}`);
    await until(() => tr.entries.some((e) => e.kind === "compact" && e.replaced?.seq === r.seq), "the compaction events", 10_000);
    await until(() => /compaction \(manual/.test(html(id)), "the compaction in the transcript", 5000);
    return r.message;
  });

  await check("update_plan twice around a refused call: the last plan is pinned above the transcript", async () => {
    const planCall = (plan: Array<{ step: string; status: string }>): ScriptStep => ({ content: "", tool_calls: [{ name: "update_plan", arguments: { plan } }] });
    await script([
      planCall([{ step: "Check the greeting", status: "in_progress" }, { step: "Say it is done", status: "pending" }]),
      planCall([{ step: "Check the greeting", status: "in_progress" }, { step: "Say it is done", status: "in_progress" }]),
      planCall([{ step: "Check the greeting", status: "completed" }, { step: "Say it is done", status: "in_progress" }]),
      { reasoning: "Planned.", content: "The greeting is fixed." },
    ]);
    const r = await vscode.commands.executeCommand<SessionPromptResult>("dsh.prompt", { sessionId: id, text: "Plan the check." });
    assert(r && r.stopReason === "completed", `prompt: ${JSON.stringify(r)}`);
    await until(() => tr.plan?.update.plan[0]?.status === "completed", "the second plan in the transcript model", 10_000);
    const header = () => html(id).slice(0, html(id).indexOf("</header>"));
    await until(() => header().includes("1 of 2 completed") && header().includes(`data-status="in_progress"`), "the plan in the transcript's header", 5000);
    assert(html(id).includes("at most one step may be in_progress"), "the refused call's error is not in the transcript");
    results.expectPlan = "Plan · 1 of 2 completed";
    // The page's figures the harness checks now include this turn's steps.
    if (results.expect) {
      results.expect = { ...results.expect, usage: await (await api.client()).usage(id) };
    }
    return `plan at seq ${tr.plan?.seq}`;
  });

  await check("a step calls update_plan and task: the plan stays pinned, the child is under its step in the transcript and the tree, and opens with what its model saw", async () => {
    await script([
      {
        content: "",
        tool_calls: [
          { name: "update_plan", arguments: { plan: [{ step: "Check the greeting", status: "completed" }, { step: "Have it reviewed", status: "in_progress" }] } },
          { name: "task", arguments: { description: "review the script", prompt: "CHILD: review src/greet.sh", context: "fresh" } },
        ],
      },
      { content: "CHILD-ANSWER: the script is fine." },
      { content: "The sub-agent reviewed it." },
    ]);
    const r = await vscode.commands.executeCommand<SessionPromptResult>("dsh.prompt", { sessionId: id, text: "Have the script reviewed." });
    assert(r && r.stopReason === "completed", `prompt: ${JSON.stringify(r)}`);
    await until(() => [...tr.steps.values()].some((s) => s.children.length > 0), "the task/spawn in the transcript model", 10_000);
    const step = [...tr.steps.values()].find((s) => s.children.length > 0)!;
    const child = step.children[0].sessionId;
    // The transcript: the child's line, with its button, inside the turn after its step's section.
    await until(() => html(id).includes(`data-child="${child}"`), "the child's line in the transcript", 5000);
    const page = html(id);
    assert(page.includes(`data-child-step="${step.step}"`) && page.includes(`data-action="openChild" data-session="${child}"`), "the child's line names no step or has no open button");
    assert(page.indexOf(`id="step-${step.step}"`) < page.indexOf(`data-child="${child}"`), "the child's line is not after its step");
    const header = page.slice(0, page.indexOf("</header>"));
    assert(header.includes("Have it reviewed") && header.includes("1 of 2 completed"), "the plan is not pinned in the header");
    // The tree: not at the top level, but under its parent's step.
    const roots = await api.tree.getChildren();
    assert(!roots.some((n) => n.kind === "session" && n.summary.sessionId === child), "the child is listed at the top level");
    const root = roots.find((n) => n.kind === "session" && n.summary.sessionId === id);
    assert(root, "the parent is not in the tree");
    let under: TreeNode | undefined;
    for (const turn of await api.tree.getChildren(root)) {
      for (const stepNode of await api.tree.getChildren(turn)) {
        if (stepNode.kind === "step" && stepNode.step.step === step.step) {
          under = (await api.tree.getChildren(stepNode)).find((n) => n.kind === "session" && n.summary.sessionId === child);
        }
      }
    }
    assert(under && under.kind === "session", `the child ${child} is not under step ${step.step} in the tree`);
    assert(under.summary.parent?.sessionId === id, `the child's listing names ${JSON.stringify(under.summary.parent)} as its parent`);
    const back = api.tree.getParent(under);
    assert(back?.kind === "step" && back.step.step === step.step, "the tree's parent of the child is not its step");
    // Its own transcript, and what its model saw.
    await vscode.commands.executeCommand("dsh.openSession", child);
    const c = api.transcript(child);
    assert(c, "the child's transcript is not open");
    await until(() => (api.transcriptHtml(child) ?? "").includes("CHILD-ANSWER: the script is fine."), "the child's answer in its transcript", 10_000);
    const uri = await vscode.commands.executeCommand<string>("dsh.whatTheModelSaw", { sessionId: child, step: 1 });
    assert(uri, "no document for the child's step 1");
    const saw = await documentText(uri);
    assert(saw.includes("CHILD: review src/greet.sh") && saw.includes("matches the rebuilt body byte for byte"), "the child's request is not what its model saw");
    results.expectChild = { parentId: id, childId: child };
    if (results.expect) {
      results.expect = { ...results.expect, usage: await (await api.client()).usage(id) };
    }
    return `${child} under step ${step.step}`;
  });

  // Before step 2 ran: the script had its typo, AGENTS.md was not edited yet (the user's edit
  // came between turns 1 and 2, and a rewind restores every file the checkpoint recorded).
  await check("rewind to before step 2: the dialog (clicked in the page) lists the files, they are restored, the fork opens", async () => {
    const greet = path.join(ws, "src", "greet.sh");
    assert(readFileSync(greet, "utf8").includes("Hello, $1!"), "step 2 wrote the fix");
    // The harness clicks "Rewind" in the modal dialog.
    const outcome = await withTimeout(
      Promise.resolve(vscode.commands.executeCommand<RewindOutcome>("dsh.rewind", { sessionId: id, step: 2 })),
      60_000,
      "the rewind",
    );
    assert(outcome?.kind === "done", `rewind: ${JSON.stringify(outcome)}`);
    assert(JSON.stringify([...outcome.result.restored].sort()) === JSON.stringify(["AGENTS.md", "src/greet.sh"]), `restored ${JSON.stringify(outcome.result.restored)}`);
    assert(readFileSync(greet, "utf8") === '#!/bin/sh\necho "Helo, $1!"\n', "the script is back as before step 2");
    assert(!readFileSync(path.join(ws, "AGENTS.md"), "utf8").includes("Every script takes the name"), "AGENTS.md is back as before step 2");
    const fork = outcome.result.sessionId;
    assert(fork !== id && api.transcript(fork) && api.transcriptHtml(fork) !== undefined, `the fork ${fork} is not open`);
    const f = api.transcript(fork)!;
    await until(() => f.steps.size === 1, "the fork's step 1", 10_000);
    return `${outcome.message}`;
  });

  await check("after a daemon restart the sessions are listed and reopen with their full transcript", async () => {
    const before = await (await api.client()).status();
    const lastSeq = tr.lastSeq;
    await vscode.commands.executeCommand("dsh.restartDaemon");
    const c = await api.client();
    const after = await c.status();
    assert(after.pid !== before.pid, `the daemon pid is still ${after.pid}`);
    const list = (await vscode.commands.executeCommand<SessionSummary[] | undefined>("dsh.refresh")) ?? [];
    for (const want of [id, forkId]) {
      assert(list.some((s) => s.sessionId === want), `${want} not listed`);
    }
    const roots = await api.tree.getChildren();
    assert(roots.some((n) => n.kind === "session" && n.summary.sessionId === id), "not in the tree after the restart");
    // A fresh transcript from seq 0 on the new daemon equals the one built live.
    const fresh = new Transcript(id);
    const sub = await c.subscribe(id, 0, (e) => fresh.apply(e));
    await until(() => fresh.lastSeq >= lastSeq, "the replay", 10_000);
    await sub.dispose();
    assert(fresh.steps.size === tr.steps.size, `${fresh.steps.size} vs ${tr.steps.size} steps`);
    for (const [n, s] of tr.steps) {
      const x = fresh.steps.get(n)!;
      assert(x.text === s.text && x.state === s.state && JSON.stringify(x.usage) === JSON.stringify(s.usage), `step ${n} differs after the restart`);
    }
    // The open session resubscribed from where it was.
    await until(() => api.subscribed(id), "the resubscription", 10_000);
    return `pid ${before.pid} → ${after.pid}; ${list.length} sessions`;
  });

  await check("a picture attached to a prompt (dsh: Prompt with Image…) on a model that reads images shows in the transcript; a click opens it full size", async () => {
    const png = readFileSync(o.imagePath);
    const sha256 = createHash("sha256").update(png).digest("hex");
    const name = path.basename(o.imagePath);
    // The default profile's model reads no images: the daemon refuses before logging anything.
    const before = tr.lastSeq;
    const refused = await vscode.commands.executeCommand<SessionPromptResult | { error: string }>("dsh.promptWithImage", { sessionId: id, text: "What is in this picture?", images: [o.imagePath] });
    const why = refused && !("stopReason" in refused) ? (refused.error ?? "") : "";
    assert(why.includes("does not read images") && why.includes("nothing was logged"), `the refusal: ${JSON.stringify(refused)}`);
    results.expectImageRefusal = "does not read images";
    await new Promise((r) => setTimeout(r, 500));
    assert(tr.lastSeq === before, "the refused prompt logged something");
    // A session on the profile whose model reads images (the user's configuration), its
    // transcript alone in the editor area (the harness's screenshot of the picture).
    await vscode.commands.executeCommand("workbench.action.closeAllGroups");
    const { sessionId: imageId } = await (await api.client()).createSession(ws, undefined, { profile: "vision" });
    await script([{ content: "A gradient from dark to light, 96 by 64 pixels." }]);
    const r = await vscode.commands.executeCommand<SessionPromptResult>("dsh.promptWithImage", { sessionId: imageId, text: "What is in this picture?", images: [o.imagePath] });
    assert(r && "stopReason" in r && r.stopReason === "completed", `the prompt with a picture: ${JSON.stringify(r)}`);
    const it = api.transcript(imageId);
    assert(it, "the picture's session is not open");
    await until(() => it.images.length === 1, "the prompt's image in the transcript model", 10_000);
    const ref = it.images[0];
    assert(ref.sha256 === sha256 && ref.size === png.length && ref.mediaType === "image/png" && ref.name === name, `the logged reference ${JSON.stringify(ref)}`);
    // Fetched from the daemon (session/object) and shown.
    await until(() => (api.transcriptHtml(imageId) ?? "").includes(`data-image="${sha256}" data-state="loaded"`), "the picture loaded in the transcript", 10_000);
    results.expectImage = { sessionId: imageId, sha256, name, size: formatBytes(png.length) };
    phase("the picture in the page (the harness checks it and clicks it)");
    const checked = `${o.resultPath}.image-checked`;
    await until(() => existsSync(checked), "the harness's check of the picture in the page", 120_000);
    // The click opened the picture from a private file: 0600 in a 0700 directory, the same bytes.
    const fileName = imageFileName(ref);
    let opened = "";
    await until(
      () => {
        for (const tab of vscode.window.tabGroups.all.flatMap((g) => g.tabs)) {
          const input = tab.input;
          const uri = input instanceof vscode.TabInputCustom || input instanceof vscode.TabInputText ? input.uri : undefined;
          if (uri && path.basename(uri.fsPath) === fileName) {
            opened = uri.fsPath;
          }
        }
        return opened !== "";
      },
      `a tab with ${fileName}`,
      10_000,
    );
    assert((statSync(opened).mode & 0o777) === 0o600 && (statSync(path.dirname(opened)).mode & 0o777) === 0o700, `${opened} is not private`);
    assert(readFileSync(opened).equals(png), "the opened file is not the picture");
    return `${imageId}: ${ref.name} (${ref.size} bytes, ${sha256.slice(0, 12)}…) opened from ${opened}`;
  });

  await check("arrange the window for the screenshot", async () => {
    await vscode.commands.executeCommand("workbench.action.closeAllGroups");
    await vscode.commands.executeCommand("workbench.action.closePanel");
    await vscode.commands.executeCommand("workbench.action.closeAuxiliaryBar");
    await vscode.commands.executeCommand("notifications.clearAll");
    await vscode.commands.executeCommand("workbench.view.extension.dsh");
    // All groups closed: the transcript opens in the first column; its session becomes the active one.
    await vscode.commands.executeCommand("dsh.openSession", { sessionId: id });
    // The tree redraws as sessions change; reveal once it has settled.
    let revealed = "";
    for (let attempt = 0; attempt < 5 && !revealed; attempt++) {
      await new Promise((r) => setTimeout(r, 500));
      try {
        const roots = await api.tree.getChildren();
        const root = roots.find((n): n is Extract<TreeNode, { kind: "session" }> => n.kind === "session" && n.summary.sessionId === id);
        if (root) {
          await api.treeView.reveal(root, { expand: 2, select: true, focus: false });
          revealed = "revealed";
        }
      } catch (e) {
        revealed = attempt === 4 ? `not revealed: ${String(e)}` : "";
      }
    }
    return `${revealed}; status bar: ${api.statusText()}`;
  });

  return finish();

  function finish(): Results {
    results.done = true;
    results.phase = "done";
    write();
    return results;
  }
}

/** A document's text as the editor holds it (served by the extension's content provider). */
async function documentText(uri: string): Promise<string> {
  return (await vscode.workspace.openTextDocument(vscode.Uri.parse(uri))).getText();
}

function assert(cond: unknown, message: string): asserts cond {
  if (!cond) {
    throw new Error(message);
  }
}

async function until(pred: () => boolean, what: string, ms: number): Promise<void> {
  const start = Date.now();
  while (!pred()) {
    if (Date.now() - start > ms) {
      throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms))]);
}
