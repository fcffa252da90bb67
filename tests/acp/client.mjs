// The ACP front driven by the TypeScript ACP SDK (npm `@agentclientprotocol/sdk`): `dsh acp`
// spawned against the mock provider; every frame in both directions is written to FRAMES (one
// JSON object per line, `{dir: "sent" | "received", frame}`) for the schema check that
// client.py's harness runs over it.
//
//   node tests/acp/client.mjs DSH_BIN MOCK_URL HOME WORKSPACE FRAMES
//
// Scenarios: new → prompt with a tool call needing permission (allowed) → streamed thoughts and
// text → end_turn; cancel mid-stream → cancelled; steering mid-turn joins the next request;
// list; what the model saw equals the mock's recorded body; fork at a step; update_plan twice
// around a refused call is two `plan` updates; load after the front exited replays the live
// updates, the plans with them.
import { spawn } from "node:child_process";
import { appendFileSync, readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import assert from "node:assert/strict";
import { client, methods, ndJsonStream } from "@agentclientprotocol/sdk";

const [dsh, mockUrl, home, workspace, framesPath] = process.argv.slice(2);
const passed = [];

async function mock(path, body) {
  const answer = await fetch(mockUrl + path, body === undefined ? {} : {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(answer.status, 200, `${path}: ${answer.status}`);
  return answer.json();
}
const script = (replies) => mock("/_fake/script", replies);
const requests = () => mock("/_fake/requests");

async function waitFor(predicate, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await predicate()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Spawns `dsh acp`; returns the child and an SDK stream whose lines are recorded. */
function spawnAcp() {
  const child = spawn(dsh, ["--base-url", mockUrl, "acp"], {
    env: { ...process.env, DSH_HOME: home, DEEPSEEK_API_KEY: "sk-test" },
    stdio: ["pipe", "pipe", "inherit"],
  });
  const record = (dir) => {
    let pending = "";
    return (bytes) => {
      pending += Buffer.from(bytes).toString("utf8");
      let newline;
      while ((newline = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        if (line.trim()) appendFileSync(framesPath, JSON.stringify({ dir, frame: JSON.parse(line) }) + "\n");
      }
    };
  };
  const sent = record("sent");
  const received = record("received");
  const fromAgent = Readable.toWeb(child.stdout).pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        sent(chunk);
        controller.enqueue(chunk);
      },
    }),
  );
  const toAgentRaw = Writable.toWeb(child.stdin);
  const writer = toAgentRaw.getWriter();
  const toAgent = new WritableStream({
    async write(chunk) {
      received(chunk);
      await writer.write(chunk);
    },
    async close() {
      await writer.close();
    },
  });
  return { child, stream: ndJsonStream(toAgent, fromAgent) };
}

function makeClient(updates, permissions) {
  return client({ name: "dsh-acp-test" })
    .onRequest(methods.client.session.requestPermission, ({ params }) => {
      permissions.push(params);
      return { outcome: { outcome: "selected", optionId: "allow_once" } };
    })
    .onNotification(methods.client.session.update, ({ params }) => {
      (updates[params.sessionId] ??= []).push(params.update);
    });
}

const textOf = (updates, kind) =>
  updates.filter((u) => u.sessionUpdate === kind).map((u) => u.content.text).join("");

async function expectError(promise, code) {
  try {
    await promise;
  } catch (error) {
    assert.equal(error.code, code, `error ${error.code} ${error.message}`);
    return;
  }
  throw new Error("expected an error");
}

const live = {};
let sessionId;
let forkId;
{
  const updates = live;
  const permissions = [];
  const { child, stream } = spawnAcp();
  await makeClient(updates, permissions).connectWith(stream, async (agent) => {
    const init = await agent.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    assert.equal(init.protocolVersion, 1);
    assert.equal(init.agentCapabilities.loadSession, true);
    passed.push("initialize");

    const session = await agent.request(methods.agent.session.new, { cwd: workspace, mcpServers: [] });
    sessionId = session.sessionId;
    await script([
      {
        reasoning: "Edit the file.",
        content: "Editing.",
        tool_calls: [{ name: "write_file", arguments: { path: "js.txt", content: "from node\n" } }],
      },
      { content: "Edited." },
    ]);
    const result = await agent.request(methods.agent.session.prompt, {
      sessionId,
      prompt: [
        { type: "text", text: "write js.txt" },
        { type: "resource_link", uri: `file://${workspace}/README`, name: "README" },
      ],
    });
    assert.equal(result.stopReason, "end_turn");
    const mine = updates[sessionId];
    assert.equal(permissions.length, 1);
    assert.deepEqual(permissions[0].options.map((o) => o.kind), ["allow_once", "allow_always", "reject_once"]);
    assert.equal(textOf(mine, "agent_thought_chunk"), "Edit the file.");
    assert.equal(textOf(mine, "agent_message_chunk"), "Editing.Edited.");
    // The client's own prompt is not echoed back; its permission request says the call's kind.
    assert.equal(textOf(mine, "user_message_chunk"), "");
    assert.equal(permissions[0].toolCall.kind, "edit");
    assert.deepEqual(permissions[0].toolCall.rawInput, { path: "js.txt", content: "from node\n" });
    assert.deepEqual(permissions[0].toolCall.locations, [{ path: `${workspace}/js.txt` }]);
    const done = mine.find((u) => u.sessionUpdate === "tool_call_update" && u.status === "completed");
    assert.ok(done.content.some((c) => c.type === "diff" && c.newText === "from node\n"));
    assert.equal(readFileSync(`${workspace}/js.txt`, "utf8"), "from node\n");
    passed.push("prompt with permission");

    // Cancel mid-stream.
    let sent = (await requests()).length;
    await script([{ content: "Slow.", delay_ms: 4000 }]);
    const running = agent.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "slow" }] });
    await waitFor(async () => (await requests()).length > sent, "the request to reach the mock");
    await agent.notify(methods.agent.session.cancel, { sessionId });
    assert.equal((await running).stopReason, "cancelled");
    passed.push("cancel");

    // Steering mid-turn joins the next request.
    sent = (await requests()).length;
    await script([
      { content: "Listing.", tool_calls: [{ name: "list_dir", arguments: { path: "." } }], delay_ms: 1500 },
      { content: "Steered." },
    ]);
    const steered = agent.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "list" }] });
    await waitFor(async () => (await requests()).length > sent, "the first request");
    const answer = await agent.request("_session/steering", {
      sessionId,
      prompt: [{ type: "text", text: "steer from node" }],
    });
    assert.equal(answer.outcome, "injected");
    assert.equal((await steered).stopReason, "end_turn");
    const bodies = (await requests()).slice(sent).map((r) => r.body);
    assert.equal(bodies.length, 2);
    assert.ok(!bodies[0].includes("steer from node") && bodies[1].includes("steer from node"));
    passed.push("steering");

    // List, what the model saw, fork.
    const listed = await agent.request(methods.agent.session.list, { cwd: workspace });
    assert.ok(listed.sessions.some((s) => s.sessionId === sessionId && s.title.startsWith("write js.txt")));
    passed.push("list");
    const steps = mine.filter((u) => u.sessionUpdate === "usage_update").map((u) => u._meta["dsh/usage"].step);
    const last = Math.max(...steps);
    const saw = await agent.request("_dsh/request", { sessionId, step: last });
    const recorded = await requests();
    assert.equal(saw.wire.body, recorded[recorded.length - 1].body);
    passed.push("what the model saw");
    const fork = await agent.request("_dsh/fork", { sessionId, step: last });
    forkId = fork.sessionId;
    assert.notEqual(forkId, sessionId);
    passed.push("fork");

    // Plans: two valid update_plan calls around a refused one (two steps in progress).
    const planCall = (plan) => ({ content: "", tool_calls: [{ name: "update_plan", arguments: { plan } }] });
    await script([
      planCall([{ step: "Read", status: "in_progress" }, { step: "Write", status: "pending" }]),
      planCall([{ step: "Read", status: "in_progress" }, { step: "Write", status: "in_progress" }]),
      planCall([{ step: "Read", status: "completed" }, { step: "Write", status: "in_progress" }]),
      { content: "Planned." },
    ]);
    const planned = await agent.request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "plan" }] });
    assert.equal(planned.stopReason, "end_turn");
    const plans = mine.filter((u) => u.sessionUpdate === "plan");
    assert.deepEqual(
      plans.map((p) => p.entries.map((e) => `${e.content}:${e.status}:${e.priority}`)),
      [["Read:in_progress:medium", "Write:pending:medium"], ["Read:completed:medium", "Write:in_progress:medium"]],
    );
    const failed = mine.filter((u) => u.sessionUpdate === "tool_call_update" && u.status === "failed");
    assert.ok(failed.some((u) => u.rawOutput.content.includes("at most one step may be in_progress")));
    passed.push("plan updates live");

    await expectError(agent.request("_dsh/unknown", {}), -32601);
    passed.push("unknown extension method");
  });
  child.stdin.end();
  await new Promise((resolve) => child.on("exit", resolve));
}

// Load after the front exited: the replay equals the live updates, with the prompts.
{
  const updates = {};
  const { child, stream } = spawnAcp();
  await makeClient(updates, []).connectWith(stream, async (agent) => {
    await agent.request(methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
    await agent.request(methods.agent.session.load, { sessionId, cwd: workspace, mcpServers: [] });
    const isPrompt = (u) => u.sessionUpdate === "user_message_chunk" && !u._meta?.["dsh/steering"];
    const prompts = updates[sessionId].filter(isPrompt);
    assert.ok(textOf(prompts, "user_message_chunk").startsWith(`write js.txt\n[@README](file://${workspace}/README)`));
    assert.deepEqual(updates[sessionId].filter((u) => !isPrompt(u)), live[sessionId]);
    assert.equal(updates[sessionId].filter((u) => u.sessionUpdate === "plan").length, 2);
    await agent.request(methods.agent.session.load, { sessionId: forkId, cwd: workspace, mcpServers: [] });
    assert.ok(textOf(updates[forkId], "user_message_chunk").startsWith("write js.txt"));
    passed.push("load replays live (plans too)");
  });
  child.stdin.end();
  await new Promise((resolve) => child.on("exit", resolve));
}

console.log(`typescript ACP SDK: ${passed.length} scenarios passed: ${passed.join(", ")}`);
