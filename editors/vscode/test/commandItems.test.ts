// The `/` completion of the prompt box: which prompt commands are offered for what is typed.

import assert from "node:assert/strict";
import { test } from "node:test";
import { commandItems } from "../src/commandItems";
import type { CommandInfo, LogEvent, SessionEvent } from "../src/protocol.generated";
import { renderTranscript } from "../src/render";
import { Transcript } from "../src/transcript";

const commands: CommandInfo[] = [
  { name: "review", description: "Reviews a file", argumentHint: "FILE", source: ".dsh/commands/review.md" },
  { name: "release", source: "/home/u/.config/dsh/commands/release.md" },
];

test("a slash and the start of a name offers the commands it starts", () => {
  assert.deepEqual(
    commandItems(commands, "/re").map((i) => i.label),
    ["/review", "/release"],
  );
  assert.deepEqual(commandItems(commands, "/rev"), [
    { name: "review", label: "/review", description: "FILE", detail: "Reviews a file" },
  ]);
  // Without a description, the file says where it comes from.
  assert.equal(commandItems(commands, "/rel")[0].detail, "/home/u/.config/dsh/commands/release.md");
  assert.equal(commandItems(commands, "/").length, 2);
});

test("plain text, an escaped slash, or arguments already typed offer nothing", () => {
  assert.deepEqual(commandItems(commands, "review"), []);
  assert.deepEqual(commandItems(commands, "//review"), []);
  assert.deepEqual(commandItems(commands, "/review src/a.rs"), []);
  assert.deepEqual(commandItems(commands, "/zz"), []);
});

test("a prompt command's expansion is shown with its command and file", () => {
  const t = new Transcript("cmd");
  const events: LogEvent[] = [
    { type: "session/meta", data: { formatVersion: 0, sessionId: "cmd", workspace: "/w" } },
    { type: "turn/start", data: { turn: 1 } },
    { type: "user/message", data: { text: "Review a.rs now.", command: { name: "review", source: ".dsh/commands/review.md" } } },
  ];
  t.applyAll(events.map((e, seq) => ({ sessionId: "cmd", seq, time: 0, ...e }) as SessionEvent));
  const html = renderTranscript(t);
  assert.ok(html.includes("/review (.dsh/commands/review.md):"), html);
  assert.ok(html.includes("Review a.rs now."), html);
});
