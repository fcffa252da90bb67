// "Rewind to before this step" (src/rewind.ts, the flow the `dsh.rewind` command runs) against the
// real daemon (`dsh stdio --in-process`) and the real mock provider, in a workspace that is not a
// git repository. The dialogs are scripted: each question is recorded and answered in turn.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { DshClient, RpcError } from "../src/daemon";
import { ErrorCodes } from "../src/protocol.generated";
import { OVERWRITE, REWIND, rewind, rewindQuestion, type RewindQuestion, type RewindUi } from "../src/rewind";
import { Transcript } from "../src/transcript";
import { cleanup, dshBin, hasStdio, makeWorkspace, Mock, tempDir, until } from "./support";

const skip = hasStdio() ? false : `${dshBin()} has no \`stdio\` subcommand yet (the daemon has not landed)`;

/** Dialogs answered from a script; what they were asked is kept. */
class ScriptedUi implements RewindUi {
  readonly questions: RewindQuestion[] = [];
  readonly overwrites: Array<{ conflicts: string[]; message: string }> = [];
  constructor(
    private readonly answers: { confirm?: boolean; overwrite?: boolean; whileAsking?: () => void; unsaved?: string[] },
  ) {}

  unsaved(paths: string[]): string[] {
    return paths.filter((p) => this.answers.unsaved?.includes(p));
  }

  async confirm(q: RewindQuestion): Promise<boolean> {
    this.questions.push(q);
    // What the user does while the dialog is open (edits a file, say).
    this.answers.whileAsking?.();
    return this.answers.confirm ?? false;
  }

  async overwrite(conflicts: string[], message: string): Promise<boolean> {
    this.overwrites.push({ conflicts, message });
    return this.answers.overwrite ?? false;
  }
}

describe("rewind against the daemon and the mock", { skip }, () => {
  let mock: Mock;
  let home: string;
  let ws: string;
  let client: DshClient;
  let sessionId: string;
  const file = (name: string) => path.join(ws, name);
  const read = (name: string) => readFileSync(file(name), "utf8");

  before(async () => {
    mock = await Mock.start();
    home = tempDir("rewindhome");
    ws = makeWorkspace();
    const config = path.join(home, "config.toml");
    // Writes run without asking: the test is about the rewind, not approvals.
    writeFileSync(config, `[approvals]\nwrite = "auto"\n`);
    const env = { ...process.env, DEEPSEEK_API_KEY: "sk-test", DSH_CONFIG: config };
    client = await DshClient.start({ path: dshBin(), home: path.join(home, "state"), baseUrl: mock.url, inProcess: true, env, clientName: "dsh-vscode-test" });
    // Step 1 writes a new file, step 2 edits one that was there.
    await mock.script([
      { content: "Adding notes.", tool_calls: [{ name: "write_file", arguments: { path: "notes.txt", content: "by the agent\n" } }] },
      { tool_calls: [{ name: "edit_file", arguments: { path: "src/greet.sh", old_string: "Helo", new_string: "Hello" } }] },
      { content: "Done." },
    ]);
    ({ sessionId } = await client.createSession(ws));
    const result = await client.prompt(sessionId, "add notes and fix the typo");
    assert.equal(result.stopReason, "completed");
    assert.equal(read("notes.txt"), "by the agent\n");
    assert.match(read("src/greet.sh"), /Hello/);
  });

  after(async () => {
    client?.kill();
    await client?.waitExit();
    mock?.stop();
    cleanup(home, ws);
  });

  test("the question lists the files the dry run would change; cancelling changes nothing", async () => {
    // notes.txt has unsaved changes in the editor; README.md too, but the rewind does not touch it.
    const ui = new ScriptedUi({ confirm: false, unsaved: ["notes.txt", "README.md"] });
    const outcome = await rewind(client, { sessionId, step: 1 }, ui);
    assert.equal(outcome.kind, "cancelled");
    const [q] = ui.questions;
    assert.equal(ui.questions.length, 1);
    assert.deepEqual([q.plan.restored, q.plan.created, q.plan.deleted, q.plan.conflicts], [["src/greet.sh"], [], ["notes.txt"], []]);
    assert.equal(q.plan.dryRun, true);
    assert.equal(q.action, REWIND);
    assert.equal(q.message, "Rewind the files and the conversation to before step 1?");
    assert.match(q.detail, /^Restore \(1\): src\/greet\.sh\nDelete \(1\): notes\.txt\n/);
    assert.match(q.detail, /continues in a new session forked before step 1/);
    assert.match(q.detail, /\nUnsaved in the editor \(1\): notes\.txt\. The rewind changes them on disk/);
    assert.equal(read("notes.txt"), "by the agent\n");
    assert.match(read("src/greet.sh"), /Hello/);
  });

  test("a file edited while the question is open refuses the rewind; declining to overwrite changes nothing", async () => {
    const ui = new ScriptedUi({ confirm: true, overwrite: false, whileAsking: () => writeFileSync(file("src/greet.sh"), "edited by hand\n") });
    const outcome = await rewind(client, { sessionId, step: 1 }, ui);
    assert.equal(outcome.kind, "cancelled");
    assert.deepEqual(ui.overwrites.map((o) => o.conflicts), [["src/greet.sh"]]);
    assert.match(ui.overwrites[0].message, /a file was changed by someone other than the agent: src\/greet\.sh\. Overwrite it\?/);
    assert.equal(read("src/greet.sh"), "edited by hand\n");
    assert.ok(existsSync(file("notes.txt")));
  });

  test("the daemon refuses a conflicting rewind without force, with the files in its data", async () => {
    await assert.rejects(client.rewind({ sessionId, step: 1 }), (e: unknown) => {
      assert.ok(e instanceof RpcError, String(e));
      assert.equal(e.code, ErrorCodes.rewindConflict);
      assert.deepEqual(e.data, { conflicts: ["src/greet.sh"] });
      return true;
    });
  });

  test("with the user's change in the dry run the action overwrites; the files come back and a fork continues", async () => {
    const ui = new ScriptedUi({ confirm: true });
    const outcome = await rewind(client, { sessionId, step: 1 }, ui);
    const [q] = ui.questions;
    assert.equal(q.action, OVERWRITE);
    assert.deepEqual(q.plan.conflicts, ["src/greet.sh"]);
    assert.match(q.detail, /by someone else, and overwritten \(1\): src\/greet\.sh/);
    assert.equal(ui.overwrites.length, 0);
    assert.equal(outcome.kind, "done");
    if (outcome.kind !== "done") {
      return;
    }
    assert.equal(read("src/greet.sh"), '#!/bin/sh\necho "Helo, $1!"\n');
    assert.ok(!existsSync(file("notes.txt")), "the file step 1 created is gone");
    const fork = outcome.result.sessionId;
    assert.notEqual(fork, sessionId);
    assert.equal(outcome.message, `dsh: rewound to before step 1. Restored (1): src/greet.sh; Deleted (1): notes.txt. The conversation continues in ${fork}.`);
    // The fork is where the user continues: its transcript has the prompt, not the steps.
    const t = new Transcript(fork);
    const sub = await client.subscribe(fork, 0, (e) => t.apply(e));
    const page = await client.events(fork, 0, 1000);
    await until(() => t.lastSeq === page.length - 1, "the fork's events");
    assert.equal(t.turns[0]?.prompt, "add notes and fix the typo");
    assert.equal(t.steps.size, 0, "the fork ends before step 1");
    await mock.script([{ content: "Starting over." }]);
    const next = await client.prompt(fork, "only fix the typo");
    assert.equal(next.stopReason, "completed");
    const body = JSON.stringify((await mock.requests()).at(-1));
    assert.ok(body.includes("add notes and fix the typo") && body.includes("only fix the typo"), body);
    assert.ok(!body.includes("Adding notes."), "the fork's request has nothing of step 1's answer");
    await sub.dispose();
    // The rewound session keeps its steps, as history.
    assert.equal((await client.usage(sessionId)).rows.length, 3);
  });

  test("a rewind while a turn runs says to cancel the turn first and asks nothing", async () => {
    await mock.script([{ content: "Slowly.", delay_ms: 4000 }]);
    const running = client.prompt(sessionId, "take your time");
    const t = new Transcript(sessionId);
    const sub = await client.subscribe(sessionId, 0, (e) => t.apply(e));
    await until(() => t.running && t.lastStep?.state === "running", "the running step");
    const ui = new ScriptedUi({ confirm: true });
    const outcome = await rewind(client, { sessionId, step: 1 }, ui);
    assert.equal(outcome.kind, "busy");
    assert.match(outcome.kind === "busy" ? outcome.message : "", /^dsh: cannot rewind now: session \S+ is running a turn: cancel it first/);
    assert.equal(ui.questions.length, 0);
    await client.cancel(sessionId);
    assert.equal((await running).stopReason, "cancelled");
    await sub.dispose();
  });

  test("files only: the same session continues", async () => {
    const plan = await client.rewind({ sessionId, step: 2, conversation: false, dryRun: true });
    const q = rewindQuestion({ sessionId, step: 2, conversation: false }, plan);
    assert.equal(q.message, "Rewind the files to before step 2?");
    assert.match(q.detail, /The session continues as it is/);
    const outcome = await rewind(client, { sessionId, step: 2, conversation: false }, new ScriptedUi({ confirm: true }));
    assert.equal(outcome.kind, "done");
    if (outcome.kind === "done") {
      assert.equal(outcome.result.sessionId, sessionId);
      assert.match(outcome.message, /The session continues\.$/);
    }
    // Before step 2 ran: step 1's file is there, the typo not fixed yet.
    assert.equal(read("notes.txt"), "by the agent\n");
    assert.equal(read("src/greet.sh"), '#!/bin/sh\necho "Helo, $1!"\n');
  });
});
