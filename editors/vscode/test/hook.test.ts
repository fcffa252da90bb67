// A hook's run (`hook/run`) in the transcript: one line, in the words `dsh prompt` prints, from
// a log built out of the generated types.

import { test } from "node:test";
import assert from "node:assert/strict";
import type { LogEvent, SessionEvent } from "../src/protocol.generated";
import { hookText } from "../src/hookText";
import { renderTranscript } from "../src/render";
import { Transcript } from "../src/transcript";

function log(list: LogEvent[]): SessionEvent[] {
  return list.map((e, seq) => ({ sessionId: "s", seq, time: 0, ...e }));
}

test("a hook that blocked, failed or went on shows as one line", () => {
  const t = new Transcript("s");
  t.applyAll(
    log([
      { type: "session/meta", data: { formatVersion: 0, sessionId: "s", workspace: "/w" } },
      {
        type: "hook/run",
        data: { hook: "greet", source: "/u/c.toml:1", event: "SessionStart", outcome: "ok", exitCode: 0, durationMs: 12, stdoutBytes: 3 },
      },
      { type: "turn/start", data: { turn: 1 } },
      { type: "user/message", data: { text: "Clean up." } },
      { type: "step/start", data: { step: 1, turn: 1 } },
      {
        type: "assistant/message",
        data: { step: 1, message: { content: "", reasoningContent: "", toolCalls: [{ id: "c1", name: "run_command", arguments: "{}" }] } },
      },
      {
        type: "hook/run",
        data: {
          hook: "guard",
          source: "/u/c.toml:4",
          event: "PreToolUse",
          callId: "c1",
          tool: "run_command",
          outcome: "blocked",
          exitCode: 2,
          durationMs: 5,
          stderr: "\nno rm here\n",
          stdoutBytes: 0,
        },
      },
    ]),
  );
  const html = renderTranscript(t);
  assert.ok(html.includes("hook greet (SessionStart) ok, 12 ms"), html);
  assert.ok(html.includes("hook guard (PreToolUse, run_command) blocked: no rm here"), html);
  assert.equal(
    hookText({
      hook: "loud",
      source: "/u/c.toml:9",
      event: "PostToolUse",
      outcome: "failed",
      error: "timed out after 1 s",
      durationMs: 1000,
      stdoutBytes: 9000000,
      stdoutTruncated: true,
      invalidUtf8: true,
    }),
    "⚠ hook loud (PostToolUse) failed: timed out after 1 s [its output was cut] [invalid UTF-8 was replaced]",
  );
});
