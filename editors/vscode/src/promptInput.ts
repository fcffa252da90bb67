// The prompt's input box: free text, and while its first word is `/name`, the workspace's prompt
// commands to pick from (`session/commands`; docs/skills.md). Picking one puts `/name ` in the box
// for its arguments; Enter on anything else sends the text as typed (the daemon expands a command).
// Its "Attach image…" button picks image files to send with the prompt; the title lists them.

import * as vscode from "vscode";
import { commandItems, type CommandItem } from "./commandItems";
import { attachedText } from "./images";
import type { CommandInfo } from "./protocol.generated";

/** What the box answers: the text, and the image files attached (absolute paths). */
export type PromptAnswer = { text: string; images: string[] };

export type PromptBoxOptions = {
  /** Images attached before the box opens (`dsh: Prompt with Image…` picks them first). */
  images?: string[];
  /** Picks image files (a file dialog); undefined or empty when the user picked none. */
  pickImages: () => Promise<string[] | undefined>;
};

const ATTACH: vscode.QuickInputButton = { iconPath: new vscode.ThemeIcon("file-media"), tooltip: "Attach image…" };
const DETACH: vscode.QuickInputButton = { iconPath: new vscode.ThemeIcon("clear-all"), tooltip: "Remove the attached images" };

/** Asks for a prompt; `commands` is asked once, when the box opens (a failure offers none). */
export function askPrompt(commands: () => Promise<CommandInfo[]>, title: string, placeholder: string, o: PromptBoxOptions): Promise<PromptAnswer | undefined> {
  const box = vscode.window.createQuickPick<CommandItem>();
  let images = [...(o.images ?? [])];
  const show = () => {
    const attached = attachedText(images);
    box.title = attached ? `${title} — ${attached}` : title;
    box.buttons = images.length ? [ATTACH, DETACH] : [ATTACH];
  };
  show();
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
    // While the file dialog is up the box may be hidden (in the browser the dialog is itself a
    // quick input): that is no answer.
    let picking = false;
    const finish = (answer: PromptAnswer | undefined) => {
      if (!done) {
        done = true;
        resolve(answer);
        box.dispose();
      }
    };
    box.onDidChangeValue((value) => {
      box.items = commandItems(known, value);
    });
    box.onDidTriggerButton(async (button) => {
      if (button === DETACH) {
        images = [];
        show();
        return;
      }
      picking = true;
      try {
        const picked = await o.pickImages();
        images = [...images, ...(picked ?? []).filter((p) => !images.includes(p))];
      } finally {
        picking = false;
        show();
        box.show();
      }
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
      finish(box.value.trim() ? { text: box.value, images } : undefined);
    });
    box.onDidHide(() => {
      if (!picking) {
        finish(undefined);
      }
    });
    box.show();
  });
}
