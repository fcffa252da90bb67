// Builds the viewer into dist/ (committed: the dsh binary embeds it, so cargo needs no npm):
// src/app.ts bundled and minified by esbuild, the stylesheet bundled, the page and icon copied.
// `--check` builds into a temporary directory and fails when dist/ differs (a stale bundle).
import { build } from "esbuild";
import { copyFileSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const check = process.argv.includes("--check");
const out = check ? mkdtempSync(join(tmpdir(), "dsh-web-")) : join(root, "dist");

await build({
  entryPoints: [join(root, "src/app.ts"), join(root, "src/app.css")],
  outdir: out,
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  legalComments: "none",
  logLevel: "warning",
});
for (const file of ["index.html", "favicon.svg"]) {
  copyFileSync(join(root, "src", file), join(out, file));
}
if (check) {
  const dist = join(root, "dist");
  const stale = readdirSync(out).filter((file) => {
    try {
      return !readFileSync(join(out, file)).equals(readFileSync(join(dist, file)));
    } catch {
      return true;
    }
  });
  rmSync(out, { recursive: true, force: true });
  if (stale.length) {
    console.error(`web/dist is stale (${stale.join(", ")}): run web/scripts/build.sh and commit web/dist`);
    process.exit(1);
  }
  console.log("web/dist is fresh");
}
