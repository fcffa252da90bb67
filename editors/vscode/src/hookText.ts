// One line for a hook's run (`hook/run`, docs/hooks.md) in the transcript — the words
// `dsh prompt` prints. Pure: no `vscode`.

import type { HookRun } from "./protocol.generated";

/** "⛔ hook guard (PreToolUse, run_command) blocked: no rm here". */
export function hookText(r: HookRun): string {
  const about = r.tool !== undefined ? `${r.event}, ${r.tool}` : r.event;
  const head = `hook ${r.hook} (${about})`;
  const reason = (r.stderr ?? "").split("\n").find((line) => line.trim() !== "") ?? "";
  let text =
    r.outcome === "ok"
      ? `${head} ok, ${r.durationMs} ms`
      : r.outcome === "blocked"
        ? reason === ""
          ? `⛔ ${head} blocked`
          : `⛔ ${head} blocked: ${reason}`
        : `⚠ ${head} failed: ${r.error ?? "it failed"}`;
  if (r.stdoutTruncated) {
    text += " [its output was cut]";
  }
  if (r.stderrTruncated) {
    text += " [its error output was cut]";
  }
  if (r.invalidUtf8) {
    text += " [invalid UTF-8 was replaced]";
  }
  return text;
}
