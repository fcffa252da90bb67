// "Rewind to before this step": the workspace's files and the conversation back to just before
// a step ran (`session/rewind`). The flow asks the daemon for a dry run first, shows the files it
// would change and asks to confirm; files someone other than the agent changed since its last
// checkpoint make the action "Overwrite and Rewind" (`force`), and a rewind refused for files
// changed after the question asks once more. The conversation continues in a fork: the answer's
// `sessionId`. No `vscode` import: the questions go through `RewindUi`, which the extension
// answers with modal dialogs and the tests with scripted answers.

import { RpcError, type DshClient } from "./daemon";
import { ErrorCodes, type RewindConflictData, type RewindFailedData, type SessionRewindResult } from "./protocol.generated";

/** What to rewind: a session to before a step, its files and/or its conversation (both by default). */
export type RewindTarget = { sessionId: string; step: number; files?: boolean; conversation?: boolean };

/** The confirmation a rewind asks for, from its dry run. */
export type RewindQuestion = {
  /** One line: what is rewound. */
  message: string;
  /** The files it changes, those it cannot restore, those it overwrites, where the conversation goes. */
  detail: string;
  /** The button that rewinds: "Rewind", or "Overwrite and Rewind" when it overwrites someone's changes. */
  action: string;
  plan: SessionRewindResult;
};

export type RewindUi = {
  /** Of the workspace paths the rewind writes or deletes, those with unsaved changes in the editor. */
  unsaved?(paths: string[]): string[];
  /** Whether to rewind as the question says. */
  confirm(question: RewindQuestion): Promise<boolean>;
  /** The rewind was refused for files changed since the question: whether to overwrite them. */
  overwrite(conflicts: string[], message: string): Promise<boolean>;
};

export type RewindOutcome =
  | { kind: "done"; result: SessionRewindResult; message: string }
  | { kind: "cancelled"; plan?: SessionRewindResult }
  /** The session is busy (`sessionBusy`): a turn runs and must be cancelled first, or another
   * rewind holds it. */
  | { kind: "busy"; message: string };

export const REWIND = "Rewind";
export const OVERWRITE = "Overwrite and Rewind";

/** How many paths a list shows before it says how many more. */
const LISTED = 12;

function list(paths: string[]): string {
  const shown = paths.slice(0, LISTED).join(", ");
  return paths.length > LISTED ? `${shown} and ${paths.length - LISTED} more` : shown;
}

/** What the rewind changes (or, `done`, changed), a line per kind of change. */
export function rewindChanges(plan: SessionRewindResult, done = false): string[] {
  const lines: string[] = [];
  const add = (label: string, paths: string[]) => {
    if (paths.length > 0) {
      lines.push(`${label} (${paths.length}): ${list(paths)}`);
    }
  };
  add(done ? "Restored" : "Restore", plan.restored);
  add(done ? "Recreated" : "Recreate", plan.created);
  add(done ? "Deleted" : "Delete", plan.deleted);
  add("Not restorable (over the size cap)", plan.notRestorable);
  if (plan.incomplete) {
    lines.push(`The checkpoint is incomplete: ${plan.incomplete}`);
  }
  if (lines.length === 0) {
    lines.push(done ? "No file changed." : "No file changes.");
  }
  return lines;
}

/** The question a rewind asks, from its dry run; `unsaved`: the files it touches that have
 * unsaved changes in the editor. */
export function rewindQuestion(target: RewindTarget, plan: SessionRewindResult, unsaved: string[] = []): RewindQuestion {
  const conversation = target.conversation ?? true;
  const files = target.files ?? true;
  const what = files && conversation ? "the files and the conversation" : files ? "the files" : "the conversation";
  const lines = files ? rewindChanges(plan) : [];
  if (plan.conflicts.length > 0) {
    lines.push("", `Changed since the agent's last checkpoint by someone else, and overwritten (${plan.conflicts.length}): ${list(plan.conflicts)}`);
  }
  if (unsaved.length > 0) {
    lines.push("", `Unsaved in the editor (${unsaved.length}): ${list(unsaved)}. The rewind changes them on disk; saving the editor's text afterwards would undo that for them.`);
  }
  lines.push("", conversation ? `The conversation continues in a new session forked before step ${target.step}; this one stays as it is, as history.` : `The session continues as it is; its next request notes the files that changed.`);
  return {
    message: `Rewind ${what} to before step ${target.step}?`,
    detail: lines.join("\n"),
    action: plan.conflicts.length > 0 ? OVERWRITE : REWIND,
    plan,
  };
}

/** What the user is told after the rewind. */
export function rewoundMessage(target: RewindTarget, result: SessionRewindResult): string {
  const changes = (target.files ?? true) ? ` ${rewindChanges(result, true).join("; ")}.` : "";
  const continues = result.sessionId === target.sessionId ? "The session continues." : `The conversation continues in ${result.sessionId}.`;
  return `dsh: rewound to before step ${target.step}.${changes} ${continues}`;
}

/** A rewind refused because the session is busy: the daemon's words say why and what to do (a
 * turn runs: cancel it first; another rewind holds it: retry). */
export function busyMessage(e: RpcError): string {
  return `dsh: cannot rewind now: ${e.message}`;
}

/** An error's `data`, as the protocol types it for the error's code (`errorData` in the
 * schema): an error's, never an event's. */
function errorData<T>(e: RpcError): T | undefined {
  const data: unknown = e.data;
  return data === undefined || data === null ? undefined : (data as T);
}

/** A rewind that failed part-way, with which files are in which state. */
export function failedMessage(e: RpcError): string {
  const data = errorData<RewindFailedData>(e);
  if (!data) {
    return e.message;
  }
  const failed = data.failed.map((f) => `${f.path} (${f.error})`);
  return `${e.message}\nRestored: ${list(data.done) || "none"}\nFailed: ${list(failed) || "none"}\nNot reached: ${list(data.notReached) || "none"}`;
}

/** Runs the rewind's flow: dry run, question, rewind (forced when the user said so). Errors
 * other than a busy session and a conflict after the question are thrown. */
export async function rewind(client: Pick<DshClient, "rewind">, target: RewindTarget, ui: RewindUi): Promise<RewindOutcome> {
  const params = { sessionId: target.sessionId, step: target.step, files: target.files, conversation: target.conversation };
  const busy = (e: unknown): RewindOutcome | undefined => (e instanceof RpcError && e.code === ErrorCodes.sessionBusy ? { kind: "busy", message: busyMessage(e) } : undefined);
  let plan: SessionRewindResult;
  try {
    plan = await client.rewind({ ...params, dryRun: true });
  } catch (e) {
    return refused(e, busy(e));
  }
  const touched = [...plan.restored, ...plan.created, ...plan.deleted];
  const question = rewindQuestion(target, plan, target.files === false ? [] : (ui.unsaved?.(touched) ?? []));
  if (!(await ui.confirm(question))) {
    return { kind: "cancelled", plan };
  }
  const force = question.action === OVERWRITE;
  let result: SessionRewindResult;
  try {
    result = await client.rewind({ ...params, force });
  } catch (e) {
    if (!(e instanceof RpcError && e.code === ErrorCodes.rewindConflict)) {
      return refused(e, busy(e));
    }
    const conflicts = errorData<RewindConflictData>(e)?.conflicts ?? [];
    const message = `Since you confirmed, ${conflicts.length === 1 ? "a file was" : `${conflicts.length} files were`} changed by someone other than the agent: ${list(conflicts)}. Overwrite ${conflicts.length === 1 ? "it" : "them"}?`;
    if (!(await ui.overwrite(conflicts, message))) {
      return { kind: "cancelled", plan };
    }
    try {
      result = await client.rewind({ ...params, force: true });
    } catch (again) {
      return refused(again, busy(again));
    }
  }
  return { kind: "done", result, message: rewoundMessage(target, result) };
}

function refused(e: unknown, busy: RewindOutcome | undefined): RewindOutcome {
  if (busy) {
    return busy;
  }
  if (e instanceof RpcError && e.code === ErrorCodes.rewindFailed) {
    throw new RpcError(e.code, failedMessage(e), e.data, e.method);
  }
  throw e;
}
