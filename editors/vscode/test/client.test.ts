// The JSON-RPC client and the transcript model against the real daemon (`dsh stdio
// --in-process`, and `dsh stdio` joining a `dsh serve` it starts) and the real mock provider
// (`dsh mock`), scripted through `POST /_fake/script`.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { Transform, Writable } from "node:stream";
import * as path from "node:path";
import { DshClient, DshStartError, RpcError, describeError } from "../src/daemon";
import { ErrorCodes, type SessionEvent } from "../src/protocol.generated";
import { escapeHtml, renderTranscript } from "../src/render";
import { CONNECTION_CLOSED, RpcClient } from "../src/rpc";
import { renderSaw } from "../src/saw";
import { Transcript, approvalChoices, approvalPrompt } from "../src/transcript";
import { formatMoney, sessionDescription, statusText, stepAnnotation, usageMarkdown } from "../src/usage";
import { cleanup, dshBin, expectedCost, hasStdio, makeWorkspace, mcpFixtureConfig, mcpFixtureSkip, Mock, tempDir, until } from "./support";

const daemon = hasStdio();
const skip = daemon ? false : `${dshBin()} has no \`stdio\` subcommand yet (the daemon has not landed)`;

describe("start-up errors", () => {
  test("a missing binary names the path tried and the setting to change", async () => {
    await assert.rejects(DshClient.start({ path: "/nonexistent/dsh" }), (e: unknown) => {
      assert.ok(e instanceof DshStartError);
      assert.equal(e.kind, "missing");
      assert.match(e.message, /\/nonexistent\/dsh/);
      assert.match(e.message, /dsh\.path/);
      return true;
    });
    await assert.rejects(DshClient.start({ path: "dsh-not-on-path-anywhere" }), /on PATH.*dsh\.path/s);
  });

  test("a daemon that fails shows its stderr", async () => {
    // A home that cannot be created: the daemon (or, before it landed, the CLI) refuses and
    // says why on stderr.
    await assert.rejects(
      DshClient.start({ path: dshBin(), home: "/proc/version/dsh-home", inProcess: true, startTimeoutMs: 15_000 }),
      (e: unknown) => {
        assert.ok(e instanceof DshStartError, String(e));
        assert.equal(e.kind, "failed");
        assert.ok(e.stderr.trim().length > 0, "stderr is kept");
        assert.ok(e.message.includes(e.stderr.trim().split("\n")[0]), "the message shows stderr");
        return true;
      },
    );
  });
});

describe("against the daemon and the mock", { skip }, () => {
  let mock: Mock;
  let home: string;
  let ws: string;
  let client: DshClient;
  const env = () => ({ ...process.env, DEEPSEEK_API_KEY: "sk-test" });

  before(async () => {
    mock = await Mock.start();
    home = tempDir("home");
    ws = makeWorkspace();
    client = await DshClient.start({ path: dshBin(), home, baseUrl: mock.url, inProcess: true, env: env(), clientName: "dsh-vscode-test" });
  });

  after(async () => {
    client?.kill();
    await client?.waitExit();
    mock?.stop();
    cleanup(home, ws);
  });

  /** The profile the daemon's sessions run on: the default one at the mock's URL. */
  const profile = () => `deepseek@${mock.url.replace(/\/+$/, "")}`;

  /** A session with a subscription from seq 0 feeding a transcript. */
  async function openSession(): Promise<{ id: string; t: Transcript; events: SessionEvent[]; dispose: () => Promise<void> }> {
    const { sessionId } = await client.createSession(ws);
    const t = new Transcript(sessionId);
    const events: SessionEvent[] = [];
    const sub = await client.subscribe(sessionId, 0, (e) => {
      events.push(e);
      t.apply(e);
    });
    return { id: sessionId, t, events, dispose: () => sub.dispose() };
  }

  test("initialize reports the server and its methods", () => {
    assert.equal(client.info.serverInfo.name, "dsh");
    assert.equal(client.info.protocolVersion, 1);
    assert.ok(client.info.capabilities.methods.includes("session/prompt"));
    assert.ok(client.info.capabilities.eventKinds.includes("assistant/chunk"));
  });

  test("prompt streams the answer; per-step usage equals session/usage; the page API agrees", async () => {
    await mock.script([{ reasoning: "Look first.", content: "The greeting says Helo." }]);
    const s = await openSession();
    const result = await client.prompt(s.id, "What does src/greet.sh print?");
    assert.equal(result.stopReason, "completed");
    assert.equal(result.steps, 1);
    await until(() => s.t.turns[0]?.end !== undefined, "turn/end");
    const chunks = s.events.filter((e) => e.type === "assistant/chunk");
    assert.ok(chunks.length > 1, "the answer streamed in chunks");
    const step = s.t.steps.get(1)!;
    assert.equal(step.text, "The greeting says Helo.");
    assert.equal(step.reasoning, "Look first.");
    const usage = await client.usage(s.id);
    s.t.applyUsage(usage);
    assert.equal(usage.rows.length, 1);
    assert.deepEqual(step.usage, usage.rows[0].usage);
    assert.deepEqual(s.t.totals, usage.totals);
    assert.deepEqual(result.usage, usage.totals);
    // session/events pages give the same events as the subscription.
    const page = await client.events(s.id, 0, 1000);
    assert.equal(page.end, true);
    assert.deepEqual(
      page.events.map((e) => [e.seq, e.type]),
      s.events.map((e) => [e.seq, e.type]),
    );
    const listed = await client.listSessions(ws);
    const mine = listed.sessions.find((x) => x.sessionId === s.id)!;
    assert.ok(mine, "session/list has it");
    assert.equal(mine.steps, 1);
    assert.match(mine.title ?? "", /greet/);
    await s.dispose();
  });

  test("cost: every view shows each step's and the session's cost as the usage at the profile's prices", async () => {
    await mock.script([
      { reasoning: "Read it.", tool_calls: [{ name: "read_file", arguments: { path: "src/greet.sh" } }] },
      { content: "It prints Helo." },
    ]);
    const s = await openSession();
    const result = await client.prompt(s.id, "What does src/greet.sh print?");
    assert.equal(result.stopReason, "completed");
    const usage = await client.usage(s.id);
    s.t.applyUsage(usage);
    assert.equal(usage.rows.length, 2);
    // The session ran on the default profile, at the mock's URL the daemon was given (pinned: the
    // ad-hoc profile `deepseek@URL`, with the default profile's prices); the daemon names them.
    assert.equal(usage.prices.length, 1);
    const used = usage.prices[0];
    assert.deepEqual([used.profile, used.model], [profile(), "deepseek-v4-flash"]);
    const price = used.price;
    assert.ok(price.cacheHit < price.cacheMiss, `prices ${JSON.stringify(price)}`);
    const money = (amount: number) => formatMoney(amount, price.currency);
    const html = renderTranscript(s.t);
    const table = usageMarkdown(s.id, usage);
    let amount = 0;
    let saved = 0;
    for (const row of usage.rows) {
      const want = expectedCost(row.usage!, price);
      amount += want.amount;
      saved += want.saved;
      assert.ok(Math.abs(row.cost!.amount - want.amount) < 1e-12, `step ${row.step}: the daemon says ${row.cost!.amount}, the usage at the prices ${want.amount}`);
      const shown = money(want.amount);
      // The transcript's step badge, the tree's description (and the step picker), the table.
      const section = html.slice(html.indexOf(`id="step-${row.step}"`));
      const badge = section.slice(0, section.indexOf("</section>"));
      assert.ok(badge.includes(`<b>${shown}</b> cost`), `step ${row.step}: ${shown} not in ${badge}`);
      assert.ok(stepAnnotation(row.usage, row).includes(` · cost ${shown}`), stepAnnotation(row.usage, row));
      assert.ok(table.includes(`| ${row.turn} | ${row.step} |`) && table.split("\n").some((l) => l.startsWith(`| ${row.turn} | ${row.step} |`) && l.includes(`| ${shown} |`)), `step ${row.step} in\n${table}`);
    }
    // The second step read the first one's prefix from the cache: it saved something.
    assert.ok(usage.rows[1].usage!.cacheHitTokens > 0 && saved > 0, `saved ${saved}`);
    assert.ok(Math.abs(usage.cost!.amount - amount) < 1e-12 && Math.abs(usage.cost!.saved - saved) < 1e-12, JSON.stringify(usage.cost));
    // The session: the transcript's totals, what the cache saved, the prices, the status bar.
    const header = html.slice(0, html.indexOf("</header>"));
    assert.ok(header.includes(`<b>${money(amount)}</b> cost`), header);
    assert.ok(header.includes(`<b data-saved>${money(saved)}</b>`) && header.includes(`${profile()}/deepseek-v4-flash prices (USD)`), header);
    assert.ok(table.includes(`cost ${money(amount)} · the cache saved ${money(saved)} (the same tokens at the cache-miss price: ${money(amount + saved)})`), table);
    assert.ok(table.includes(`prices of ${profile()}/deepseek-v4-flash per million tokens: cache hit ${money(price.cacheHit)}, cache miss ${money(price.cacheMiss)}, output ${money(price.output)}`), table);
    assert.ok(statusText(undefined, s.t.totals, s.t.sessionCost).endsWith(` · ${money(amount)}`));
    // The session list: its total cost and its profile/model.
    const listed = (await client.listSessions(ws)).sessions.find((x) => x.sessionId === s.id)!;
    assert.ok(Math.abs(listed.cost!.amount - amount) < 1e-12, JSON.stringify(listed.cost));
    const description = sessionDescription(listed);
    assert.ok(description.includes(` · ${money(amount)} · `) && description.endsWith(` · ${profile()}/deepseek-v4-flash`), description);
    await s.dispose();
  });

  test("cost: a model without a price shows no cost anywhere, never zero", async () => {
    // The workspace's configuration adds a model the mock serves, without a price.
    const unpriced = makeWorkspace();
    mkdirSync(path.join(unpriced, ".dsh"));
    writeFileSync(path.join(unpriced, ".dsh", "config.toml"), "[providers.deepseek.models.deepseek-chat]\ncontext_window = 131072\nthinking = false\n");
    try {
      await mock.script([{ content: "Hi." }]);
      const { sessionId } = await client.createSession(unpriced, "deepseek-chat");
      const t = new Transcript(sessionId);
      const sub = await client.subscribe(sessionId, 0, (e) => t.apply(e));
      assert.equal((await client.prompt(sessionId, "hello")).stopReason, "completed");
      await until(() => t.turns[0]?.end !== undefined, "turn/end");
      const usage = await client.usage(sessionId);
      t.applyUsage(usage);
      assert.ok(usage.rows[0].usage, "the step has usage");
      assert.equal(usage.rows[0].cost, undefined);
      assert.equal(usage.cost, undefined);
      const html = renderTranscript(t);
      assert.ok(!html.includes("cost") && !html.includes("$"), html);
      assert.ok(!stepAnnotation(usage.rows[0].usage, usage.rows[0]).includes("cost"));
      const table = usageMarkdown(sessionId, usage);
      assert.ok(table.includes("cost unknown: no price configured") && !table.includes("$"), table);
      const listed = (await client.listSessions(unpriced)).sessions.find((x) => x.sessionId === sessionId)!;
      assert.equal(listed.cost, undefined);
      const description = sessionDescription(listed);
      assert.ok(!description.includes("$") && description.endsWith(` · ${profile()}/deepseek-chat`), description);
      await sub.dispose();
    } finally {
      cleanup(unpriced);
    }
  });

  test("a second prompt while a turn runs is refused as busy; steering lands in the next step", async () => {
    await mock.script([
      { reasoning: "Read it.", tool_calls: [{ name: "read_file", arguments: { path: "src/greet.sh" } }], delay_ms: 1500 },
      { content: "Done, using the steer." },
    ]);
    const s = await openSession();
    const running = client.prompt(s.id, "Fix the greeting.");
    await until(() => s.t.steps.get(1) !== undefined, "step 1 to start");
    await assert.rejects(client.prompt(s.id, "another"), (e: unknown) => {
      assert.ok(e instanceof RpcError);
      assert.equal(e.code, ErrorCodes.sessionBusy);
      return true;
    });
    const { seq } = await client.inject(s.id, "Use printf, not echo.");
    const result = await running;
    assert.equal(result.stopReason, "completed");
    await until(() => !s.t.running, "turn/end");
    const steering = s.t.entries.find((e) => e.kind === "steering");
    assert.ok(steering && steering.kind === "steering");
    assert.equal(steering.seq, seq);
    assert.equal(steering.landedStep, 2, "the steer joined step 2's request");
    assert.deepEqual(s.t.steps.get(2)!.steering, [seq]);
    const saw = await client.request(s.id, 2, true);
    const msg = saw.messages.find((m) => m.seq === seq);
    assert.ok(msg, "step 2's request holds the steering message at its seq");
    assert.match(JSON.stringify(msg.message), /Use printf/);
    assert.ok(saw.diff && saw.diff.length > 0, "a diff against step 1");
    const text = renderSaw(saw, { sessionId: s.id });
    assert.ok(text.includes(`[seq ${seq}] user`));
    await s.dispose();
  });

  test("a write asks for approval; allowing it runs the tool", async () => {
    await mock.script([
      { tool_calls: [{ name: "write_file", arguments: { path: "src/bye.sh", content: "#!/bin/sh\necho bye\n" } }] },
      { content: "Wrote it." },
    ]);
    const s = await openSession();
    const running = client.prompt(s.id, "Write src/bye.sh.");
    await until(() => s.t.pendingApprovals.size > 0, "approval/request");
    const [approval] = [...s.t.pendingApprovals.values()];
    assert.equal(approval.tool, "write_file");
    assert.ok(approval.summary.length > 0);
    const answer = await client.respondApproval(s.id, approval.approvalId, "allow");
    assert.equal(answer.accepted, true);
    const result = await running;
    assert.equal(result.stopReason, "completed");
    await until(() => !s.t.running, "turn/end");
    assert.equal(s.t.pendingApprovals.size, 0);
    const call = s.t.steps.get(1)!.toolCalls[0];
    assert.equal(call.approval?.decision, "allow");
    assert.equal(call.result?.isError, false);
    assert.equal(readFileSync(path.join(ws, "src/bye.sh"), "utf8"), "#!/bin/sh\necho bye\n");
    await s.dispose();
  });

  test("a command can be allowed once unconfined; the transcript marks that run", async () => {
    const outside = tempDir("outside");
    const marker = path.join(outside, "marker");
    const touch = { name: "run_command", arguments: { command: `touch ${marker}` } };
    await mock.script([{ tool_calls: [touch, touch] }, { content: "Touched." }]);
    const s = await openSession();
    const running = client.prompt(s.id, "Touch the marker outside the workspace.");
    await until(() => s.t.pendingApprovals.size > 0, "the first approval/request");
    const [first] = [...s.t.pendingApprovals.values()];
    assert.equal(first.sandbox, "workspace-write");
    assert.deepEqual(
      approvalChoices(first).map((c) => c.choice),
      ["allow", "deny", "allowAlways", "allowUnconfined"],
    );
    assert.equal((await client.respondApproval(s.id, first.approvalId, "allow")).accepted, true);
    await until(() => [...s.t.pendingApprovals.keys()].some((id) => id !== first.approvalId), "the second approval/request");
    const second = [...s.t.pendingApprovals.values()].find((a) => a.approvalId !== first.approvalId)!;
    assert.equal((await client.respondApproval(s.id, second.approvalId, "allowUnconfined")).accepted, true);
    assert.equal((await running).stopReason, "completed");
    await until(() => !s.t.running, "turn/end");
    const [confined, unconfined] = s.t.steps.get(1)!.toolCalls;
    assert.equal(confined.unconfined, false);
    assert.equal(confined.result?.isError, true);
    assert.match(confined.result?.content ?? "", /write outside the workspace denied/);
    assert.equal(unconfined.unconfined, true);
    assert.equal(unconfined.approval?.decision, "allowUnconfined");
    assert.equal(unconfined.result?.isError, false);
    assert.equal(existsSync(marker), true, "the unconfined run wrote outside the workspace");
    const html = renderTranscript(s.t);
    assert.match(html, /class="unconfined"/);
    assert.match(html, /allowed once, unconfined/);
    await s.dispose();
    cleanup(outside);
  });

  test("cancel stops a running turn", async () => {
    await mock.script([{ content: "slow", delay_ms: 10_000 }]);
    const s = await openSession();
    const running = client.prompt(s.id, "Take your time.");
    await until(() => s.t.steps.get(1) !== undefined, "step 1 to start");
    const c = await client.cancel(s.id);
    assert.equal(c.cancelled, true);
    const result = await running;
    assert.equal(result.stopReason, "cancelled");
    await until(() => !s.t.running, "turn/end");
    assert.equal(s.t.steps.get(1)!.state, "cancelled");
    assert.equal((await client.cancel(s.id)).cancelled, false, "nothing left to cancel");
    await s.dispose();
  });

  test("fork at a step keeps the events before its request and opens as a new session", async () => {
    await mock.script([
      { tool_calls: [{ name: "read_file", arguments: { path: "src/greet.sh" } }] },
      { content: "It prints Helo." },
      { content: "Forked answer." },
    ]);
    const s = await openSession();
    await client.prompt(s.id, "Read src/greet.sh.");
    await until(() => !s.t.running, "turn/end");
    const step2 = s.t.steps.get(2)!;
    const { sessionId: forkId } = await client.fork(s.id, 2);
    assert.notEqual(forkId, s.id);
    await assert.rejects(client.fork(s.id, 99), (e: unknown) => e instanceof RpcError && e.code === ErrorCodes.outOfRange && /no step 99/.test(e.message));
    const f = new Transcript(forkId);
    const sub = await client.subscribe(forkId, 0, (e) => f.apply(e));
    await until(() => f.lastSeq >= step2.seq - 1, "the fork's stored events");
    assert.deepEqual(f.forkedFrom, { sessionId: s.id, seq: step2.seq });
    assert.equal(f.steps.size, 1, "the fork holds step 1 only");
    const r = await client.prompt(forkId, "Now say it differently.", "queue");
    assert.equal(r.stopReason, "completed");
    await until(() => f.steps.size >= 2, "the fork's next step");
    await sub.dispose();
    await s.dispose();
  });

  test("denying a write refuses the tool call; the transcript shows the denial", async () => {
    await mock.script([
      { tool_calls: [{ name: "write_file", arguments: { path: "src/nope.sh", content: "x" } }] },
      { content: "Understood, not writing." },
    ]);
    const s = await openSession();
    const running = client.prompt(s.id, "Write src/nope.sh.");
    await until(() => s.t.pendingApprovals.size > 0, "approval/request");
    const [approval] = [...s.t.pendingApprovals.values()];
    assert.equal((await client.respondApproval(s.id, approval.approvalId, "deny")).accepted, true);
    await running;
    await until(() => !s.t.running, "turn/end");
    const call = s.t.steps.get(1)!.toolCalls[0];
    assert.equal(call.approval?.decision, "deny");
    assert.equal(call.result?.isError, true);
    assert.equal(existsSync(path.join(ws, "src/nope.sh")), false);
    assert.match(renderTranscript(s.t), /denied/);
    await assert.rejects(client.respondApproval(s.id, approval.approvalId, "allow"), (e: unknown) => e instanceof RpcError && e.code === ErrorCodes.approvalNotFound);
    await s.dispose();
  });

  test("compaction shows in the transcript, and the next step names it as the cache drop's cause", async () => {
    const s = await openSession();
    for (const word of ["one", "two", "three"]) {
      await client.prompt(s.id, `say ${word} ${"x".repeat(300)}`);
    }
    const r = await client.compact(s.id);
    assert.equal(r.compacted, true, r.message);
    await client.prompt(s.id, "and now?");
    await until(() => !s.t.running && s.t.steps.size === 4, "the turn after compaction");
    const entry = s.t.entries.find((e) => e.kind === "compact");
    assert.ok(entry && entry.kind === "compact");
    assert.equal(entry.reason, "manual");
    assert.ok(entry.summary && entry.summary.length > 0, "the summary");
    assert.equal(entry.replaced?.seq, r.seq);
    const usage = await client.usage(s.id);
    s.t.applyUsage(usage);
    const row = usage.rows.find((x) => x.step === 4)!;
    assert.match(row.explanation, new RegExp(`compaction at seq ${r.seq}`));
    const html = renderTranscript(s.t);
    assert.match(html, /compaction \(manual/);
    assert.ok(html.includes(row.explanation));
    await s.dispose();
  });

  test("an AGENTS.md edited between turns shows as one note line before the step it joined; deleted, as deleted; the same when reopened", async () => {
    // A workspace of its own: the other tests' sessions keep their AGENTS.md.
    const own = makeWorkspace();
    const agents = path.join(own, "AGENTS.md");
    try {
      await mock.script([{ content: "First." }, { content: "Second." }, { content: "Third." }]);
      const { sessionId } = await client.createSession(own);
      const t = new Transcript(sessionId);
      const sub = await client.subscribe(sessionId, 0, (e) => t.apply(e));
      assert.equal((await client.prompt(sessionId, "one")).stopReason, "completed");
      writeFileSync(agents, readFileSync(agents, "utf8") + "Answer in one line.\n");
      assert.equal((await client.prompt(sessionId, "two")).stopReason, "completed");
      await until(() => !t.running && t.steps.get(2)?.state === "done", "turn 2");
      const changed = "AGENTS.md changed: joins the next request as a note";
      let html = renderTranscript(t);
      assert.equal(html.split(changed).length - 1, 1, `${changed} once in\n${html}`);
      const at = html.indexOf(changed);
      assert.ok(html.indexOf('id="step-1"') < at && html.indexOf("Turn 1 completed") < at && html.indexOf(">two<") < at, "after turn 1 and turn 2's prompt");
      assert.ok(at < html.indexOf('id="step-2"'), "before step 2, the step it joined");
      const note = t.entries.find((e) => e.kind === "context" && e.source === "instructions");
      assert.ok(note && note.kind === "context");
      assert.equal(note.landedStep, 2);
      assert.deepEqual(t.steps.get(2)!.notes, [note.seq]);
      assert.ok(html.includes('<span class="landed">joined step 2</span>'));
      // What the fold holds is what the model read: step 2's request carries the note at its seq.
      const saw = await client.request(sessionId, 2);
      const message = saw.messages.find((m) => m.seq === note.seq);
      assert.ok(message && message.message.role === "user", `the note at seq ${note.seq} in step 2's request`);
      assert.equal(message.message.content, note.text);
      assert.match(note.text, /Answer in one line\./);
      assert.ok(html.includes(`<pre class="note-text">${escapeHtml(note.text)}</pre>`));
      // The cache held: the edit did not rewrite the system prompt.
      assert.deepEqual(t.steps.get(2)!.headerChanges, []);

      rmSync(agents);
      assert.equal((await client.prompt(sessionId, "three")).stopReason, "completed");
      await until(() => !t.running && t.steps.get(3)?.state === "done", "turn 3");
      const deleted = "AGENTS.md deleted: joins the next request as a note";
      html = renderTranscript(t);
      assert.equal(html.split(deleted).length - 1, 1, `${deleted} once in\n${html}`);
      assert.equal(html.split(changed).length - 1, 1, "the first note still once");
      const del = html.indexOf(deleted);
      assert.ok(html.indexOf("Turn 2 completed") < del && del < html.indexOf('id="step-3"'), "after turn 2, before step 3");
      await sub.dispose();

      // Reopened: a new transcript from seq 0 renders the same lines at the same places.
      const again = new Transcript(sessionId);
      const resub = await client.subscribe(sessionId, 0, (e) => again.apply(e));
      await until(() => again.lastSeq >= t.lastSeq, "the stored events");
      await resub.dispose();
      assert.equal(renderTranscript(again), html);
    } finally {
      cleanup(own);
    }
  });

  test("errors carry the daemon's code and words", async () => {
    await assert.rejects(client.request("no-such-session", 1), (e: unknown) => {
      assert.ok(e instanceof RpcError);
      assert.equal(e.code, ErrorCodes.sessionNotFound);
      assert.match(describeError(e), /sessionNotFound/);
      return true;
    });
  });
});

describe("an MCP server's tools, against the daemon, the mock and tests/mcp/fixture.py", { skip: skip || mcpFixtureSkip() }, () => {
  let mock: Mock;
  let home: string;
  let ws: string;
  let client: DshClient;

  before(async () => {
    mock = await Mock.start();
    home = tempDir("mcphome");
    ws = makeWorkspace();
    // The server in the user's file (`$DSH_CONFIG`): its calls ask, but `fail`'s is automatic.
    const config = path.join(home, "config.toml");
    writeFileSync(config, `${mcpFixtureConfig("fx")}[approvals]\nfx__fail = "auto"\n`);
    const env = { ...process.env, DEEPSEEK_API_KEY: "sk-test", DSH_CONFIG: config };
    client = await DshClient.start({ path: dshBin(), home: path.join(home, "state"), baseUrl: mock.url, inProcess: true, env, clientName: "dsh-vscode-test" });
  });

  after(async () => {
    client?.kill();
    await client?.waitExit();
    mock?.stop();
    cleanup(home, ws);
  });

  test("a turn calling fx__echo and fx__fail shows both as fx's tools, asks with the server named, and logs the results", async () => {
    await mock.script([
      { tool_calls: [{ name: "fx__echo", arguments: { text: "hi" } }, { name: "fx__fail", arguments: {} }, { name: "list_dir", arguments: { path: "." } }] },
      { content: "Echoed." },
    ]);
    const { sessionId } = await client.createSession(ws);
    const t = new Transcript(sessionId);
    const events: SessionEvent[] = [];
    const sub = await client.subscribe(sessionId, 0, (e) => {
      events.push(e);
      t.apply(e);
    });
    const running = client.prompt(sessionId, "Echo hi through fx.");
    await until(() => t.pendingApprovals.size > 0, "the approval/request of fx__echo", 60_000);
    const [approval] = [...t.pendingApprovals.values()];
    assert.equal(approval.tool, "fx__echo");
    assert.match(approvalPrompt(approval), /^dsh wants to run echo \(MCP · fx\): MCP server fx: echo /);
    assert.equal((await client.respondApproval(sessionId, approval.approvalId, "allow")).accepted, true);
    assert.equal((await running).stopReason, "completed");
    await until(() => !t.running, "turn/end");

    // The tools the model got: fx's, namespaced, beside the built-in ones.
    const [first] = (await mock.requests()) as Array<{ body: string }>;
    const names = (JSON.parse(first.body) as { tools: Array<{ function: { name: string } }> }).tools.map((x) => x.function.name);
    assert.ok(names.includes("fx__echo") && names.includes("read_file"), names.join(", "));

    const [echo, fail, list] = t.steps.get(1)!.toolCalls;
    assert.deepEqual([echo.name, echo.result?.content, echo.result?.isError, echo.approval?.decision], ["fx__echo", "echo: hi", false, "allow"]);
    assert.deepEqual([fail.name, fail.result?.content, fail.result?.isError], ["fx__fail", "it failed", true]);
    assert.equal(list.result?.isError, false);
    const html = renderTranscript(t);
    assert.match(html, new RegExp(`data-call="${echo.id}"><div class="tool-head">⚙ <b title="[^"]*">echo</b> <span class="mcp" data-mcp-server="fx"[^>]*>MCP · fx</span>`));
    assert.match(html, new RegExp(`data-call="${fail.id}"><div class="tool-head">⚙ <b title="[^"]*">fail</b> <span class="mcp" data-mcp-server="fx"[^>]*>MCP · fx</span>.*?<details class="result error"[^>]*><summary>✗ error`, "s"));
    assert.match(html, new RegExp(`data-call="${list.id}"><div class="tool-head">⚙ <b>list_dir</b> <span class="call-id">`));
    // A wait the daemon logged (mcp/wait: fx was starting at the first step) shows as its line.
    for (const e of events.filter((x) => x.type === "mcp/wait")) {
      assert.ok(html.includes(`data-seq="${e.seq}" data-mcp-wait=`), `the line of mcp/wait at seq ${e.seq}`);
    }
    // Reopened from seq 0, the transcript is the same.
    const again = new Transcript(sessionId);
    again.applyAll((await client.events(sessionId, 0, 1000)).events);
    assert.equal(renderTranscript(again), html);
    await sub.dispose();
  });
});

describe("without an API key", { skip }, () => {
  test("a new session fails with the daemon's words on how to fix it, and nothing is logged", async () => {
    const mock = await Mock.start();
    const home = tempDir("home");
    const ws = makeWorkspace();
    const env = { ...process.env };
    delete env.DEEPSEEK_API_KEY;
    const client = await DshClient.start({ path: dshBin(), home, baseUrl: mock.url, inProcess: true, env });
    try {
      // The daemon checks the key before it logs a session that could never run a turn.
      let message = "";
      try {
        await client.createSession(ws);
      } catch (e) {
        message = describeError(e);
      }
      assert.match(message, /DEEPSEEK_API_KEY/);
      const { sessions } = await client.listSessions(ws);
      assert.equal(sessions.length, 0);
    } finally {
      client.kill();
      await client.waitExit();
      mock.stop();
      cleanup(home, ws);
    }
  });
});

describe("the shared daemon across a restart", { skip }, () => {
  test("sessions are listed after a restart and reopen with their full transcript", async () => {
    const mock = await Mock.start();
    const home = tempDir("home");
    const ws = makeWorkspace();
    const opts = { path: dshBin(), home, baseUrl: mock.url, env: { ...process.env, DEEPSEEK_API_KEY: "sk-test" } };
    let client = await DshClient.start(opts);
    try {
      const { sessionId } = await client.createSession(ws);
      await client.prompt(sessionId, "hello there");
      const before = await client.events(sessionId, 0, 1000);
      const status = await client.status();
      assert.ok(status.pid > 0);
      await client.shutdown();
      await client.waitExit(10_000);
      client.kill();
      // A new bridge starts a new daemon.
      client = await DshClient.start(opts);
      const status2 = await client.status();
      assert.notEqual(status2.pid, status.pid, "a new daemon");
      const listed = await client.listSessions(ws);
      assert.ok(listed.sessions.some((s) => s.sessionId === sessionId));
      const t = new Transcript(sessionId);
      const seen: SessionEvent[] = [];
      const sub = await client.subscribe(sessionId, 0, (e) => {
        seen.push(e);
        t.apply(e);
      });
      await until(() => t.lastSeq >= before.nextSeq - 1, "the stored events");
      assert.deepEqual(
        seen.slice(0, before.events.length).map((e) => [e.seq, e.type]),
        before.events.map((e) => [e.seq, e.type]),
      );
      assert.match(t.steps.get(1)!.text, /hello there/);
      await sub.dispose();
    } finally {
      await client.shutdown().catch(() => undefined);
      client.kill();
      await client.waitExit();
      mock.stop();
      cleanup(home, ws);
    }
  });
});

describe("the JSON-RPC framing", { skip }, () => {
  test("lines split across arbitrary chunks, and many lines in one chunk, parse; close fails waiting requests", async () => {
    const mock = await Mock.start();
    const home = tempDir("home");
    const child = spawn(dshBin(), ["--home", home, "--base-url", mock.url, "stdio", "--in-process"], {
      env: { ...process.env, DEEPSEEK_API_KEY: "sk-test" },
      stdio: ["pipe", "pipe", "inherit"],
    });
    // Re-chunk the daemon's output into 7-byte pieces, and batch our requests into one write.
    const rechunk = new Transform({
      transform(chunk: Buffer, _enc, done) {
        for (let i = 0; i < chunk.length; i += 7) {
          this.push(chunk.subarray(i, i + 7));
        }
        done();
      },
    });
    child.stdout.pipe(rechunk);
    let pendingWrite = "";
    const batching = new Writable({
      write(chunk: Buffer, _enc, done) {
        pendingWrite += chunk.toString();
        done();
      },
    });
    const rpc = new RpcClient(rechunk, batching);
    try {
      const init = rpc.request<{ protocolVersion: number }>("initialize", { clientInfo: { name: "framing-test" }, protocolVersion: 1 });
      const status = rpc.request<{ pid: number }>("daemon/status", {});
      // Settled to a value at once: its rejection must not count as unhandled while we wait.
      const unknown = rpc.request("no/such/method", {}).then(
        () => undefined,
        (e: unknown) => e,
      );
      child.stdin.write(pendingWrite); // three requests in one chunk
      assert.equal((await init).protocolVersion, 1);
      assert.ok((await status).pid > 0);
      const err = await unknown;
      assert.ok(err instanceof RpcError && err.code === -32601, `expected "method not found", got ${String(err)}`);
      const ws = makeWorkspace();
      pendingWrite = "";
      const created = rpc.request<{ sessionId: string }>("session/create", { workspace: ws });
      child.stdin.write(pendingWrite);
      const { sessionId } = await created;
      pendingWrite = "";
      const listed = rpc.request<{ sessions: Array<{ sessionId: string }> }>("session/list", { workspace: ws });
      child.stdin.write(pendingWrite);
      assert.ok((await listed).sessions.some((x) => x.sessionId === sessionId));
      cleanup(ws);
      // A request that never gets its answer fails when the connection closes.
      const never = rpc.request("daemon/status", {});
      rpc.close();
      await assert.rejects(never, (e: unknown) => e instanceof RpcError && e.code === CONNECTION_CLOSED);
    } finally {
      child.stdin.end();
      child.kill();
      mock.stop();
      cleanup(home);
    }
  });
});

test("the test binary exists", () => {
  assert.ok(existsSync(dshBin()), `${dshBin()} (build it with cargo build -p dsh, or set DSH_BIN)`);
});
