// Workspace notes in the transcript, from a log built out of the generated protocol types: a
// `context/message` with `source: "workspace"` (a file the agent read changed on disk) is the
// daemon's next piece (issue 13, item 3), so its rendering is pinned here on a fixture rather
// than against the daemon. `instructions` notes are covered on real logs (transcript.test.ts,
// client.test.ts).

import { test } from "node:test";
import assert from "node:assert/strict";
import type { ContextMessage, LogEvent, SessionEvent } from "../src/protocol.generated";
import { escapeHtml, renderTranscript } from "../src/render";
import { Transcript, noteHeadline } from "../src/transcript";

/** A log from typed events: each one must be a `LogEvent` of the protocol, or this does not
 * compile; a `step/start` says which notes joined it (`joined`), as the daemon does. */
function log(list: Array<LogEvent & { joined?: number[] }>): SessionEvent[] {
  return list.map((e, seq) => ({ sessionId: "notes", seq, time: 0, ...e }));
}

const usage = { promptTokens: 1000, cacheHitTokens: 900, cacheMissTokens: 100, completionTokens: 10, reasoningTokens: 0 };

const edited: ContextMessage = {
  text: "src/a.rs changed on disk since you read it:\n\n--- src/a.rs (as you read it)\n+++ src/a.rs (now)\n@@ -1 +1 @@\n-fn a() {}\n+fn a() -> u8 { 1 }",
  source: "workspace",
  files: [{ path: "src/a.rs", change: "edited", sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" }],
};
const mixed: ContextMessage = {
  text: "src/b.rs was deleted.\nsrc/<gen>.rs changed on disk.\nsrc/c is now a directory.\nsrc/d.rs changed on disk.",
  source: "workspace",
  files: [
    { path: "src/b.rs", change: "deleted" },
    { path: "src/<gen>.rs", change: "edited", sha256: "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752" },
    { path: "src/c", change: "replaced" },
    { path: "src/d.rs", change: "edited" },
  ],
};

const events = log([
  { type: "session/meta", data: { formatVersion: 0, sessionId: "notes", workspace: "/w" } },
  { type: "turn/start", data: { turn: 1 } },
  { type: "context/message", data: { text: "Today's date is 2026-12-01.", source: "date" } },
  { type: "user/message", data: { text: "Read src/a.rs." } },
  { type: "step/start", data: { step: 1, turn: 1 }, joined: [2] },
  { type: "assistant/message", data: { step: 1, message: { content: "", toolCalls: [{ id: "c1", name: "read_file", arguments: '{"path":"src/a.rs"}' }] } } },
  { type: "tool/call", data: { step: 1, callId: "c1", name: "read_file" } },
  { type: "tool/result", data: { callId: "c1", name: "read_file", content: "fn a() {}", isError: false } },
  { type: "step/end", data: { step: 1, finishReason: "tool_calls", usage } },
  { type: "step/start", data: { step: 2, turn: 1 } },
  { type: "assistant/message", data: { step: 2, message: { content: "It defines a()." } } },
  { type: "step/end", data: { step: 2, finishReason: "stop", usage } },
  { type: "turn/end", data: { turn: 1, reason: "completed" } },
  // Between the turns, the user's editor saves src/a.rs: the next step starts with a note.
  { type: "turn/start", data: { turn: 2 } },
  { type: "user/message", data: { text: "And now?" } },
  { type: "context/message", data: edited },
  { type: "step/start", data: { step: 3, turn: 2 }, joined: [15] },
  { type: "assistant/message", data: { step: 3, message: { content: "", toolCalls: [{ id: "c2", name: "list_dir", arguments: '{"path":"src"}' }] } } },
  // Mid-step changes: a note logged while step 3 runs joins the next request, step 4's.
  { type: "context/message", data: mixed },
  { type: "tool/call", data: { step: 3, callId: "c2", name: "list_dir" } },
  { type: "tool/result", data: { callId: "c2", name: "list_dir", content: "a.rs\nc/\nd.rs", isError: false } },
  { type: "step/end", data: { step: 3, finishReason: "tool_calls", usage } },
  { type: "step/start", data: { step: 4, turn: 2 }, joined: [18] },
  { type: "assistant/message", data: { step: 4, message: { content: "a() returns 1 now." } } },
  { type: "step/end", data: { step: 4, finishReason: "stop", usage } },
  { type: "turn/end", data: { turn: 2, reason: "completed" } },
]);

test("a workspace note reads '<path> changed on disk: joins the next request as a note'", () => {
  assert.equal(noteHeadline(edited), "src/a.rs changed on disk: joins the next request as a note");
  // Paths grouped by what happened to them, in the note's order; "replaced" stays "replaced".
  assert.equal(noteHeadline(mixed), "src/b.rs deleted on disk; src/<gen>.rs, src/d.rs changed on disk; src/c replaced on disk: joins the next request as a note");
  assert.equal(noteHeadline({ source: "workspace", files: [{ path: "new.rs", change: "added" }] }), "new.rs added on disk: joins the next request as a note");
  assert.equal(noteHeadline({ source: "workspace" }), "a file changed on disk: joins the next request as a note");
  // Instruction notes: the same words without "on disk".
  assert.equal(noteHeadline({ source: "instructions", files: [{ path: "AGENTS.md", change: "edited" }] }), "AGENTS.md changed: joins the next request as a note");
  assert.equal(noteHeadline({ source: "instructions", files: [{ path: "AGENTS.md", change: "deleted" }] }), "AGENTS.md deleted: joins the next request as a note");
  assert.equal(
    noteHeadline({ source: "instructions", files: [{ path: "AGENTS.md", change: "added" }, { path: ".dsh/instructions.md", change: "added" }] }),
    "AGENTS.md, .dsh/instructions.md added: joins the next request as a note",
  );
  // The date, and sources this client does not know, are shown whole as before.
  assert.equal(noteHeadline({ source: "date" }), undefined);
  assert.equal(noteHeadline({ source: "hook" }), undefined);
  assert.equal(noteHeadline({}), undefined);
});

test("workspace notes show once each, before the step they joined, their text folded", () => {
  const t = new Transcript("notes");
  t.applyAll(events);
  const html = renderTranscript(t);
  const first = "src/a.rs changed on disk: joins the next request as a note";
  const second = escapeHtml(noteHeadline(mixed)!);
  assert.ok(second.includes("src/&lt;gen&gt;.rs"), "paths are escaped");
  for (const line of [first, second]) {
    assert.equal(html.split(line).length - 1, 1, `${line} once`);
  }
  const at1 = html.indexOf(first);
  const at2 = html.indexOf(second);
  // The first after turn 1 and turn 2's prompt, before step 3; the second (logged while step 3
  // ran) after step 3, before step 4.
  assert.ok(html.indexOf("Turn 1 completed") < at1 && html.indexOf("And now?") < at1 && at1 < html.indexOf('id="step-3"'));
  assert.ok(html.indexOf('id="step-3"') < at2 && at2 < html.indexOf('id="step-4"'));
  const notes = t.entries.filter((e) => e.kind === "context" && e.source === "workspace");
  assert.deepEqual(
    notes.map((e) => (e.kind === "context" ? [e.seq, e.landedStep] : [])),
    [
      [15, 3],
      [18, 4],
    ],
  );
  for (const [seq, note, step] of [[15, edited, 3], [18, mixed, 4]] as const) {
    const block = html.slice(html.indexOf(`<div class="msg context note" data-seq="${seq}" data-note="workspace">`));
    const details = block.slice(0, block.indexOf("</details>"));
    assert.ok(details.includes(`<details data-key="note-${seq}">`), "folded (closed) by default");
    assert.ok(details.includes(`<span class="landed">joined step ${step}</span>`), details);
    assert.ok(details.includes(`<pre class="note-text">${escapeHtml(note.text)}</pre>`), "the text the model reads, whole");
  }
  // Each step names the notes that joined its request (not the date).
  assert.deepEqual([...t.steps.values()].map((s) => [s.step, s.notes]), [[1, []], [2, []], [3, [15]], [4, [18]]]);
  const step3 = html.slice(html.indexOf('id="step-3"'), html.indexOf('id="step-4"'));
  assert.ok(step3.includes("↳ workspace note (seq 15) joined this request"), step3);
  // The date note keeps its plain rendering.
  assert.ok(html.includes(`<span class="who">context · date</span> <span class="text">Today&#39;s date is 2026-12-01.</span>`));
  // A replay from any point renders the same.
  const replay = new Transcript("notes");
  replay.applyAll(events.slice(0, 17));
  replay.applyAll(events.slice(10));
  assert.equal(renderTranscript(replay), html);
});

test("a note not yet joined says only that it joins the next request", () => {
  const t = new Transcript("notes");
  t.applyAll(events.slice(0, 16)); // up to the note before step 3
  const html = renderTranscript(t);
  assert.ok(html.includes("src/a.rs changed on disk: joins the next request as a note"));
  assert.ok(!html.includes("joined step"), html);
});
