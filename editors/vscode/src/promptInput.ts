// The prompt's input box: free text, and while its first word is `/name`, the workspace's prompt
// commands to pick from (`session/commands`; docs/skills.md). Picking one puts `/name ` in the box
// for its arguments; Enter on anything else sends the text as typed (the daemon expands a command).

import * as vscode from "vscode";
import { commandItems, type CommandItem } from "./commandItems";
import type { CommandInfo } from "./protocol.generated";

/** Asks for a prompt; `commands` is asked once, when the box opens (a failure offers none). */
export function askPrompt(commands: () => Promise<CommandInfo[]>, title: string, placeholder: string): Promise<string | undefined> {
  const box = vscode.window.createQuickPick<CommandItem>();
  box.title = title;
  box.placeholder = placeholder;
  box.ignoreFocusOut = true;
  // Free text is the answer: the box never filters it away.
  box.matchOnDescription = false;
  let known: CommandInfo[] = [];
  void commands().then(
    (listed) => {
      known = listed;
      box.items = commandItems(known, box.value);
    },
    () => undefined,
  );
  return new Promise((resolve) => {
    let done = false;
    const finish = (text: string | undefined) => {
      if (!done) {
        done = true;
        resolve(text);
        box.dispose();
      }
    };
    box.onDidChangeValue((value) => {
      box.items = commandItems(known, value);
    });
    box.onDidAccept(() => {
      const picked = box.selectedItems[0] ?? box.activeItems[0];
      const offered = commandItems(known, box.value);
      if (picked && offered.some((item) => item.name === picked.name) && box.value !== `/${picked.name} `) {
        // A command picked: its name in the box, the arguments next.
        box.value = `/${picked.name} `;
        box.items = [];
        return;
      }
      finish(box.value.trim() ? box.value : undefined);
    });
    box.onDidHide(() => finish(undefined));
    box.show();
  });
}
