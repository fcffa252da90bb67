// The end-to-end test's driver: a test-only extension, never shipped. `e2e/run.mjs` packages it
// (`npm run package:e2e-driver`) and installs it into code-server next to the packaged dsh
// extension. When `DSH_E2E_RESULTS` names a results file that does not exist yet, it runs the
// scenario (`scenario.ts`) once, shortly after start-up, against the dsh extension's commands and
// the test API its `activate()` returns; a window reload (the harness tests restoring) finds the
// file and does not run it again. `DSH_E2E_MOCK` is the mock provider's URL, `DSH_E2E_IMAGE` a PNG
// to attach to a prompt.

import { existsSync } from "node:fs";
import * as vscode from "vscode";
import type { DshTestApi } from "../../../src/extension";
import { newResults, runScenario, writeResults } from "./scenario";

/** The extension under test: `publisher.name` of its package.json. */
const DSH_EXTENSION = "dsh.dsh-vscode";

export function activate(context: vscode.ExtensionContext): void {
  const output = vscode.window.createOutputChannel("dsh e2e driver");
  context.subscriptions.push(output);
  const resultPath = process.env.DSH_E2E_RESULTS;
  if (!resultPath || existsSync(resultPath)) {
    return;
  }
  setTimeout(() => void run(resultPath, process.env.DSH_E2E_MOCK ?? "", process.env.DSH_E2E_IMAGE ?? "", (line) => output.appendLine(line)), 1500);
}

async function run(resultPath: string, mockUrl: string, imagePath: string, log: (line: string) => void): Promise<void> {
  let api: DshTestApi | undefined;
  try {
    const ext = vscode.extensions.getExtension<DshTestApi>(DSH_EXTENSION);
    if (!ext) {
      throw new Error(`${DSH_EXTENSION} is not installed`);
    }
    api = await ext.activate();
    if (!api || typeof api.client !== "function") {
      throw new Error(`${DSH_EXTENSION} returned no test API from activate()`);
    }
  } catch (e) {
    // Reported at once, rather than the harness waiting for its timeout.
    const results = newResults();
    results.checks.push({ name: "the dsh extension activates and returns its test API", ok: false, detail: e instanceof Error ? (e.stack ?? e.message) : String(e), ms: 0 });
    results.failed = 1;
    results.done = true;
    writeResults(resultPath, results);
    return;
  }
  await runScenario(api, { resultPath, mockUrl, imagePath, log });
}
