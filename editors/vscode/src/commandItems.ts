// What the prompt box offers while its first word is `/name`: the workspace's prompt commands
// whose name starts with it (docs/skills.md, "Prompt commands"). Pure: no `vscode` at run time.

import type { QuickPickItem } from "vscode";
import type { CommandInfo } from "./protocol.generated";

/** A command offered in the box. */
export interface CommandItem extends QuickPickItem {
  /** The command's name, without the slash. */
  name: string;
}

/** The commands offered for what is typed: those whose `/name` starts with `value`, while
 * `value` is a slash and a first word (no space yet); none otherwise. Pure. */
export function commandItems(commands: CommandInfo[], value: string): CommandItem[] {
  if (!value.startsWith("/") || value.startsWith("//") || /\s/.test(value)) {
    return [];
  }
  return commands
    .filter((c) => `/${c.name}`.startsWith(value))
    .map((c) => ({
      name: c.name,
      label: `/${c.name}`,
      description: c.argumentHint ?? "",
      detail: c.description ?? c.source,
    }));
}
