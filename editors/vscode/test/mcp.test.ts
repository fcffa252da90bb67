// MCP tools in the transcript, from fixture logs: a call of `fx__echo` shows as `echo` with the
// badge `MCP · fx`, a built-in tool as before; results (an `isError` one too) as built-in ones;
// the `mcp/wait` line (a step waiting for servers to start or re-list their tools) live and on
// replay.
// client.test.ts runs a real MCP server (tests/mcp/fixture.py) through the daemon.

import { test } from "node:test";
import assert from "node:assert/strict";
import type { LogEvent, SessionEvent } from "../src/protocol.generated";
import { mcpTool, mcpWaitText, toolDisplayName, type McpWait } from "../src/mcp";
import { renderTranscript } from "../src/render";
import { Transcript, approvalPrompt } from "../src/transcript";

/** A log from typed events: each one must be a `LogEvent` of the protocol, or this does not compile. */
function log(list: LogEvent[]): SessionEvent[] {
  return list.map((e, seq) => ({ sessionId: "mcp", seq, time: 0, ...e }));
}

const usage = { promptTokens: 1000, cacheHitTokens: 900, cacheMissTokens: 100, completionTokens: 10, reasoningTokens: 0 };

const events = log([
  { type: "session/meta", data: { formatVersion: 0, sessionId: "mcp", workspace: "/w" } },
  { type: "turn/start", data: { turn: 1 } },
  { type: "user/message", data: { text: "Echo hi through fx." } },
  { type: "mcp/wait", data: { servers: ["fx"], reason: "starting" } },
  { type: "step/start", data: { step: 1, turn: 1 } },
  {
    type: "assistant/message",
    data: {
      step: 1,
      message: {
        content: "",
        toolCalls: [
          { id: "c1", name: "fx__echo", arguments: '{"text":"hi"}' },
          { id: "c2", name: "read_file", arguments: '{"path":"a.txt"}' },
          { id: "c3", name: "fx__fail", arguments: "{}" },
        ],
      },
    },
  },
  { type: "step/end", data: { step: 1, finishReason: "tool_calls", usage } },
  { type: "approval/request", data: { approvalId: "a1", callId: "c1", tool: "fx__echo", summary: 'MCP server fx: echo {"text": "hi"}' } },
  { type: "approval/decision", data: { approvalId: "a1", decision: "allow" } },
  { type: "tool/call", data: { step: 1, callId: "c1", name: "fx__echo" } },
  { type: "tool/result", data: { callId: "c1", name: "fx__echo", content: "echo: hi", isError: false } },
  { type: "tool/call", data: { step: 1, callId: "c2", name: "read_file" } },
  { type: "tool/result", data: { callId: "c2", name: "read_file", content: "A", isError: false } },
  { type: "tool/call", data: { step: 1, callId: "c3", name: "fx__fail" } },
  { type: "tool/result", data: { callId: "c3", name: "fx__fail", content: "the fixture failed on purpose", isError: true } },
  // The next step waits for two servers that said their tools changed.
  { type: "mcp/wait", data: { servers: ["fx", "gy"], reason: "toolsChanged" } },
  // A kind newer than this client (a newer daemon): ignored.
  { type: "mcp/unknown-kind", data: { servers: ["zz"], reason: "starting" } } as unknown as LogEvent,
  { type: "step/start", data: { step: 2, turn: 1 } },
  { type: "assistant/message", data: { step: 2, message: { content: "Echoed." } } },
  { type: "step/end", data: { step: 2, finishReason: "stop", usage } },
  { type: "turn/end", data: { turn: 1, reason: "completed" } },
]);

/** The head line of one tool call in the page. */
function toolHead(html: string, callId: string): string {
  const m = new RegExp(`<div class="tool" data-call="${callId}"><div class="tool-head">(.*?)</div>`).exec(html);
  assert.ok(m, `no tool call ${callId} in the page`);
  return m[1];
}

test("an MCP tool's request name splits at the first __ into its server and its own name", () => {
  assert.deepEqual(mcpTool("fx__echo"), { server: "fx", tool: "echo" });
  assert.deepEqual(mcpTool("my-db__run__query"), { server: "my-db", tool: "run__query" });
  assert.deepEqual(mcpTool("S3__list_buckets"), { server: "S3", tool: "list_buckets" });
  assert.equal(mcpTool(undefined), undefined, "an approval without a tool name renders as before");
  for (const builtIn of ["read_file", "write_file", "edit_file", "run_command", "list_dir", "glob", "grep"]) {
    assert.equal(mcpTool(builtIn), undefined, builtIn);
    assert.equal(toolDisplayName(builtIn), builtIn);
  }
  // Not a server name: empty, with `_`, longer than 32; nor a tool name: empty.
  for (const odd of ["__echo", "my_db__q", `${"a".repeat(33)}__q`, "fx__", "fx_echo"]) {
    assert.equal(mcpTool(odd), undefined, odd);
  }
  assert.deepEqual(mcpTool(`${"a".repeat(32)}__q`), { server: "a".repeat(32), tool: "q" });
  assert.equal(toolDisplayName("fx__echo"), "echo (MCP · fx)");
});

test("an MCP tool call shows its own name with the server's badge; a built-in one as before", () => {
  const t = new Transcript("mcp");
  t.applyAll(events);
  const calls = t.steps.get(1)!.toolCalls;
  assert.deepEqual(
    calls.map((c) => c.name),
    ["fx__echo", "read_file", "fx__fail"],
  );
  const html = renderTranscript(t);
  const echo = toolHead(html, "c1");
  assert.match(echo, /^⚙ <b title="[^"]*">echo<\/b> <span class="mcp" data-mcp-server="fx" title="a tool of MCP server fx; the model calls it fx__echo">MCP · fx<\/span> <span class="call-id">c1<\/span>$/);
  assert.equal(toolHead(html, "c2"), '⚙ <b>read_file</b> <span class="call-id">c2</span>');
  assert.match(toolHead(html, "c3"), /<b title="[^"]*">fail<\/b> <span class="mcp" data-mcp-server="fx"/);
  assert.equal((html.match(/class="mcp"/g) ?? []).length, 2, "a badge on each MCP call, none on read_file");
  // Results as built-in ones: a success folds open under ✓, an isError result under ✗.
  assert.match(html, /<div class="tool" data-call="c1">.*?✓ result · seq 10<\/summary><pre>echo: hi<\/pre>/s);
  assert.match(html, /<div class="tool" data-call="c3">.*?<details class="result error"[^>]*><summary>✗ error · seq 14<\/summary><pre>the fixture failed on purpose<\/pre>/s);
  // The approval inside the call says what the daemon said, and its verdict.
  assert.match(html, /<div class="tool" data-call="c1">.*?<span class="approval-label">approval<\/span> MCP server fx: echo \{&quot;text&quot;: &quot;hi&quot;\} — <span class="decision allow">allowed<\/span>/s);
});

test("the native approval prompt names an MCP tool with its server, a built-in one as before", () => {
  assert.equal(
    approvalPrompt({ tool: "fx__echo", summary: 'MCP server fx: echo {"text": "hi"}' }),
    'dsh wants to run echo (MCP · fx): MCP server fx: echo {"text": "hi"}',
  );
  assert.equal(approvalPrompt({ tool: "write_file", summary: "write a.txt (2 bytes)" }), "dsh wants to run write_file: write a.txt (2 bytes)");
  assert.equal(approvalPrompt({ tool: "run_command", summary: "run_command: ls", sandbox: "workspace-write" }), "dsh wants to run run_command: run_command: ls [sandbox: workspace-write]");
});

test("an approval standing alone (its call not in view) carries the MCP badge; a built-in one does not", () => {
  const t = new Transcript("alone");
  t.applyAll(
    log([
      { type: "session/meta", data: { formatVersion: 0, sessionId: "alone", workspace: "/w" } },
      { type: "approval/request", data: { approvalId: "a1", callId: "gone1", tool: "fx__echo", summary: "MCP server fx: echo {}" } },
      { type: "approval/request", data: { approvalId: "a2", callId: "gone2", tool: "write_file", summary: "write a.txt (1 byte)" } },
    ]),
  );
  const html = renderTranscript(t);
  assert.match(html, /<span class="approval-label">approval<\/span> <b title="[^"]*">echo<\/b> <span class="mcp" data-mcp-server="fx"[^>]*>MCP · fx<\/span> MCP server fx: echo \{\}/);
  assert.match(html, /<span class="approval-label">approval<\/span> write a\.txt \(1 byte\) — /);
});

test("mcp/wait reads as one line: both reasons, one and two servers", () => {
  assert.equal(mcpWaitText({ servers: ["fx"], reason: "starting" }), "waiting for MCP server fx to start");
  assert.equal(mcpWaitText({ servers: ["fx", "gy"], reason: "starting" }), "waiting for MCP servers fx, gy to start");
  assert.equal(mcpWaitText({ servers: ["fx"], reason: "toolsChanged" }), "waiting for MCP server fx to list its changed tools");
  assert.equal(mcpWaitText({ servers: ["fx", "gy"], reason: "toolsChanged" }), "waiting for MCP servers fx, gy to list their changed tools");
  // A reason newer than the generated types is named as it came; no servers still reads.
  assert.equal(mcpWaitText({ servers: ["fx"], reason: "restarting" as McpWait["reason"] }), "waiting for MCP server fx (restarting)");
  assert.equal(mcpWaitText({ servers: [], reason: "starting" }), "waiting for MCP servers to start");
});

test("mcp/wait shows once, before the step that waited, live and on replay; unknown kinds stay ignored", () => {
  const live = new Transcript("mcp");
  const seen: string[] = [];
  for (const e of events) {
    const change = live.apply(e);
    if (e.type === "mcp/wait") {
      // Live: the line is there as soon as the event is, before its step starts.
      assert.equal(change.kind, "structure");
      seen.push(renderTranscript(live));
    }
    if ((e.type as string) === "mcp/unknown-kind") {
      assert.equal(change.kind, "none");
    }
  }
  assert.match(seen[0], /waiting for MCP server fx to start/);
  assert.doesNotMatch(seen[0], /id="step-1"/);
  assert.match(seen[1], /waiting for MCP servers fx, gy to list their changed tools/);
  assert.doesNotMatch(seen[1], /id="step-2"/);

  const html = renderTranscript(live);
  const lines = [...html.matchAll(/<div class="notice mcp-wait" data-seq="(\d+)" data-mcp-wait="(\w+)">(.*?) <span class="seq">/g)].map((m) => [Number(m[1]), m[2], m[3]]);
  assert.deepEqual(lines, [
    [3, "starting", "waiting for MCP server fx to start"],
    [15, "toolsChanged", "waiting for MCP servers fx, gy to list their changed tools"],
  ]);
  // Each before the step it waited for, after what came before it.
  assert.ok(html.indexOf("Echo hi through fx.") < html.indexOf('data-seq="3"'));
  assert.ok(html.indexOf('data-seq="3"') < html.indexOf('id="step-1"'));
  assert.ok(html.indexOf('id="step-1"') < html.indexOf('data-seq="15"'));
  assert.ok(html.indexOf('data-seq="15"') < html.indexOf('id="step-2"'));
  assert.doesNotMatch(html, /zz/, "the unknown kind left nothing");
  assert.deepEqual(
    live.entries.map((e) => e.kind),
    ["turn", "user", "mcpWait", "step", "mcpWait", "step", "turnEnd"],
  );

  // Replay: the whole log at once, and again over it, gives the same page.
  const replay = new Transcript("mcp");
  replay.applyAll(events);
  replay.applyAll(events);
  assert.equal(renderTranscript(replay), html);
});
