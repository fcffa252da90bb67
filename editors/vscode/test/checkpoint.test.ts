// The workspace checkpoint events (`workspace/checkpoint`, `workspace/rewind`) in the transcript:
// one line each, in the words `dsh prompt` prints, from a log built out of the generated types.

import { test } from "node:test";
import assert from "node:assert/strict";
import type { LogEvent, SessionEvent } from "../src/protocol.generated";
import { renderTranscript } from "../src/render";
import { Transcript } from "../src/transcript";

function log(list: LogEvent[]): SessionEvent[] {
  return list.map((e, seq) => ({ sessionId: "fork", seq, time: 0, ...e }));
}

test("a checkpoint and a rewind each show as one line", () => {
  const t = new Transcript("fork");
  t.applyAll(
    log([
      { type: "session/meta", data: { formatVersion: 0, sessionId: "fork", workspace: "/w" } },
      { type: "workspace/checkpoint", data: { reason: "turnEnd", root: "ab".repeat(32), files: 4, changed: ["a.txt", "b.txt"] } },
      {
        type: "workspace/rewind",
        data: {
          fromSession: "parent",
          toStep: 1,
          checkpoint: "cd".repeat(32),
          before: "ab".repeat(32),
          restored: ["a.txt", "b.txt"],
          created: ["c.txt"],
          deleted: ["new.txt"],
          forced: true,
          conversation: true,
          files: true,
        },
      },
      { type: "workspace/checkpoint", data: { step: 2, reason: "step", root: "ef".repeat(32), files: 4, incomplete: "disk full" } },
    ]),
  );
  const html = renderTranscript(t);
  assert.ok(html.includes("checkpoint at the turn&#39;s end: 4 files, 2 changed") || html.includes("checkpoint at the turn's end: 4 files, 2 changed"), html);
  assert.ok(html.includes("rewound files and conversation of parent to just before step 1: 2 restored, 1 created, 1 deleted (forced)"), html);
  assert.ok(html.includes("(incomplete: disk full)"), html);
  assert.ok(html.indexOf("rewound") < html.indexOf("incomplete"), "in log order");
});
