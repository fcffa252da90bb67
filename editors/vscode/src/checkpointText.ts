// One line each for the workspace checkpoint events (`workspace/checkpoint`,
// `workspace/rewind`, docs/rewind.md) in the transcript. Pure: no `vscode`.

import type { WorkspaceCheckpoint, WorkspaceRewind } from "./protocol.generated";

/** "checkpoint before step 3's tools: 12 files, 2 changed". */
export function checkpointText(c: WorkspaceCheckpoint): string {
  const when =
    c.step !== undefined ? `before step ${c.step}'s tools` : c.reason === "rewind" ? "before a rewind" : "at the turn's end";
  let text = `checkpoint ${when}: ${c.files} files, ${(c.changed ?? []).length} changed`;
  const tooLarge = (c.tooLarge ?? []).length;
  if (tooLarge > 0) {
    text += `, ${tooLarge} over the size cap`;
  }
  if (c.incomplete !== undefined) {
    text += ` (incomplete: ${c.incomplete})`;
  }
  return text;
}

/** "rewound files and conversation of S to just before step 1: 2 restored, 2 created, 2 deleted". */
export function rewindText(r: WorkspaceRewind): string {
  const what = r.files && r.conversation ? "files and conversation" : r.files ? "files" : "conversation";
  const to = r.toStep !== undefined ? `to just before step ${r.toStep}` : "to a checkpoint";
  let text = `⟲ rewound ${what} of ${r.fromSession} ${to}`;
  if (r.files) {
    text += `: ${(r.restored ?? []).length} restored, ${(r.created ?? []).length} created, ${(r.deleted ?? []).length} deleted`;
    if (r.forced) {
      text += " (forced)";
    }
  }
  return text;
}
