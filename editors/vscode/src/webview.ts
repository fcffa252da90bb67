// The transcript webview's page: styles (VS Code theme variables), and a small script that
// swaps in re-rendered HTML (keeping folds and scroll) and posts button clicks back. No `vscode`.

export const TRANSCRIPT_CSS = `
:root { --hit-high: var(--vscode-charts-green, #3fb950); --hit-mid: var(--vscode-charts-yellow, #d29922);
  --hit-low: var(--vscode-charts-red, #f85149); --hit-cold: var(--vscode-charts-blue, #58a6ff); }
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground);
  background: var(--vscode-editor-background); padding: 0 18px 40px; line-height: 1.45; }
header.session { position: sticky; top: 0; z-index: 2; background: var(--vscode-editor-background);
  padding: 12px 0 10px; border-bottom: 1px solid var(--vscode-panel-border, #444); margin-bottom: 10px; }
header .title { font-size: 1.25em; font-weight: 600; }
header .meta { opacity: .75; font-size: .9em; margin: 2px 0 6px; }
header .running { color: var(--hit-cold); margin-left: 6px; }
header .fork { margin-left: 6px; }
header .plan { margin-top: 8px; font-size: .92em; }
header .plan .plan-why { opacity: .8; font-style: italic; }
header .plan-steps { margin: 4px 0 0; padding-left: 22px; max-height: 30vh; overflow-y: auto; }
header .plan-step .mark { display: inline-block; width: 1.2em; }
header .plan-step.completed { opacity: .65; }
header .plan-step.completed .mark { color: var(--hit-high); }
header .plan-step.in_progress { font-weight: 600; }
header .plan-step.in_progress .mark { color: var(--hit-cold); }
.turn-start { margin: 18px 0 6px; font-weight: 600; opacity: .8; text-transform: uppercase; letter-spacing: .06em; font-size: .8em;
  display: flex; align-items: center; gap: 8px; }
.turn-start::after { content: ""; flex: 1; border-top: 1px solid var(--vscode-panel-border, #444); }
.msg { margin: 6px 0; padding: 8px 12px; border-radius: 6px; }
.msg .who { font-weight: 600; font-size: .85em; opacity: .85; margin-bottom: 2px; }
.msg .text { white-space: pre-wrap; }
.msg.user { background: var(--vscode-textBlockQuote-background, rgba(127,127,127,.1)); border-left: 3px solid var(--vscode-textLink-foreground); }
.msg.steering { background: rgba(210,153,34,.10); border-left: 3px solid var(--hit-mid); }
.msg.context { font-size: .85em; opacity: .65; padding: 2px 12px; }
.msg.note { opacity: .9; border-left: 3px solid var(--hit-cold); }
.msg.note summary { cursor: pointer; }
.msg.note .note-line { font-weight: 600; }
.seq { font-weight: normal; opacity: .6; font-size: .9em; font-family: var(--vscode-editor-font-family); }
.landed { margin-left: 8px; font-weight: 600; color: var(--hit-mid); }
.landed.pending { opacity: .8; font-style: italic; }
section.step { margin: 8px 0; padding: 8px 12px; border: 1px solid var(--vscode-panel-border, #444); border-radius: 6px; }
section.step.running { border-color: var(--hit-cold); }
section.step.cancelled, section.step.error { border-color: var(--hit-low); }
.step-head { display: flex; align-items: center; gap: 8px; flex-wrap: wrap; }
.step-no { font-weight: 600; }
.spinner { color: var(--hit-cold); animation: pulse 1s infinite; }
@keyframes pulse { 50% { opacity: .3; } }
.usage { font-family: var(--vscode-editor-font-family); font-size: .88em; padding: 1px 8px; border-radius: 10px;
  border: 1px solid currentColor; white-space: nowrap; }
.usage .part b { font-weight: 600; }
.usage .sep { opacity: .6; }
.usage.high { color: var(--hit-high); } .usage.mid { color: var(--hit-mid); } .usage.low { color: var(--hit-low); }
.usage.cold { color: var(--hit-cold); } .usage.none { opacity: .6; border-style: dashed; }
header .totals { display: inline-block; }
header .money { font-size: .85em; opacity: .8; margin-top: 4px; }
.usage .part.cost b { font-weight: 700; }
.actions { margin-left: auto; display: flex; gap: 4px; }
button { background: var(--vscode-button-secondaryBackground, #3a3d41); color: var(--vscode-button-secondaryForeground, #fff);
  border: none; border-radius: 3px; padding: 1px 8px; cursor: pointer; font-size: .85em; }
button:hover { background: var(--vscode-button-secondaryHoverBackground, #45494e); }
.cause { font-size: .88em; margin: 4px 0 0; opacity: .85; }
.cause.dropped { color: var(--hit-low); opacity: 1; font-weight: 600; }
.steered { font-size: .88em; color: var(--hit-mid); margin-top: 4px; }
.steered.noted { color: var(--hit-cold); }
.hdr { font-size: .85em; opacity: .7; margin-top: 2px; }
details.reasoning { margin: 6px 0; opacity: .8; }
details.reasoning summary { cursor: pointer; font-style: italic; font-size: .9em; }
details.reasoning .text { white-space: pre-wrap; font-style: italic; padding: 4px 0 0 14px; }
.answer { white-space: pre-wrap; margin: 6px 0; }
.tool { margin: 6px 0; padding: 6px 10px; background: var(--vscode-textCodeBlock-background, rgba(127,127,127,.12)); border-radius: 4px; }
.tool-head { font-size: .9em; }
.mcp { font-size: .8em; font-weight: 600; padding: 0 5px; border-radius: 3px; white-space: nowrap;
  border: 1px solid var(--hit-cold); color: var(--hit-cold); }
.call-id { opacity: .5; font-size: .85em; font-family: var(--vscode-editor-font-family); }
pre { font-family: var(--vscode-editor-font-family); font-size: var(--vscode-editor-font-size, 12px); white-space: pre-wrap;
  word-break: break-word; margin: 4px 0; max-height: 320px; overflow: auto; }
pre.args { opacity: .9; }
details.result summary { cursor: pointer; font-size: .85em; color: var(--hit-high); }
details.result.error summary { color: var(--hit-low); }
.pending { font-size: .85em; opacity: .7; font-style: italic; }
.approval { font-size: .9em; margin: 4px 0; }
.approval-label { font-size: .8em; font-weight: 600; text-transform: uppercase; letter-spacing: .05em; padding: 0 5px; border-radius: 3px;
  background: rgba(210,153,34,.18); color: var(--hit-mid); }
.decision.allow, .decision.allowAlways { color: var(--hit-high); font-weight: 600; }
.decision.allowUnconfined, .unconfined { color: var(--hit-low); font-weight: 600; }
.unconfined { border: 1px solid var(--hit-low); border-radius: 3px; padding: 0 .3em; font-size: .85em; }
.sandbox { opacity: .7; font-size: .9em; }
.decision.deny, .decision.timeout { color: var(--hit-low); font-weight: 600; }
.decision.waiting { color: var(--hit-mid); font-weight: 600; }
.step-error { color: var(--hit-low); margin-top: 4px; }
.retry { font-size: .85em; color: var(--hit-mid); }
.turn-end { font-size: .85em; margin: 6px 0 4px; opacity: .75; }
.turn-end.cancelled, .turn-end.error, .turn-end.limit { color: var(--hit-low); opacity: 1; }
.notice.limit { color: var(--hit-low); }
.notice.mcp-wait { opacity: .8; font-style: italic; }
.compact, .notice { font-size: .88em; margin: 8px 0; padding: 4px 10px; border-left: 3px solid var(--hit-cold); }
.empty { opacity: .6; margin-top: 30px; }
.flash { outline: 2px solid var(--vscode-focusBorder); }
.images { display: flex; flex-wrap: wrap; gap: 10px; margin: 6px 0 2px; }
figure.image { margin: 0; max-width: 100%; }
figure.image figcaption { font-size: .82em; opacity: .75; margin-top: 2px; font-family: var(--vscode-editor-font-family); }
button.image-open { display: block; padding: 0; background: none; border: 1px solid var(--vscode-panel-border, #444); border-radius: 4px;
  cursor: zoom-in; max-width: 100%; }
button.image-open:hover { background: none; border-color: var(--vscode-focusBorder); }
figure.image img { display: block; max-width: 100%; max-height: 360px; width: auto; height: auto; border-radius: 3px; }
.image-placeholder { font-size: .88em; padding: 10px 12px; border: 1px dashed var(--vscode-panel-border, #666); border-radius: 4px; }
figure.image.loading .image-placeholder { opacity: .7; font-style: italic; }
figure.image.missing .image-placeholder { color: var(--hit-low); border-color: var(--hit-low); }
`;

/** The page's script (exported for the tests, which run it against a stand-in DOM). */
export const TRANSCRIPT_SCRIPT = `
const vscode = acquireVsCodeApi();
const main = document.getElementById('main');
// Image bytes as data: URLs by hash: sent once by the extension, kept across re-renders while
// shown. A full render drops those it does not show (the extension's PageImages does the same,
// and posts one again when it is shown again): the page holds no more than its transcript shows.
const images = new Map();
function fillImages() {
  for (const img of document.querySelectorAll('img[data-sha256]')) {
    const url = images.get(img.dataset.sha256);
    if (url && img.getAttribute('src') !== url) img.setAttribute('src', url);
  }
}
function keepShownImages() {
  const shown = new Set([...document.querySelectorAll('img[data-sha256]')].map(img => img.dataset.sha256));
  for (const sha256 of [...images.keys()]) if (!shown.has(sha256)) images.delete(sha256);
}
vscode.setState({ sessionId: document.body.dataset.session });
function openKeys() {
  return new Set([...document.querySelectorAll('details[data-key]')].filter(d => d.open).map(d => d.dataset.key));
}
function closedKeys() {
  return new Set([...document.querySelectorAll('details[data-key]')].filter(d => !d.open).map(d => d.dataset.key));
}
function swap(apply, follow) {
  const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
  const open = openKeys(), closed = closedKeys();
  apply();
  fillImages();
  for (const d of document.querySelectorAll('details[data-key]')) {
    if (open.has(d.dataset.key)) d.open = true;
    if (closed.has(d.dataset.key)) d.open = false;
  }
  if (atBottom && follow !== false) window.scrollTo(0, document.body.scrollHeight);
}
window.addEventListener('message', (ev) => {
  const m = ev.data;
  if (m.type === 'render') {
    swap(() => { main.innerHTML = m.html; keepShownImages(); }, m.follow);
  } else if (m.type === 'step') {
    const el = document.getElementById('step-' + m.step);
    if (el) swap(() => { el.outerHTML = m.html; }, m.follow);
  } else if (m.type === 'images') {
    for (const [sha256, url] of Object.entries(m.images)) images.set(sha256, url);
    fillImages();
  } else if (m.type === 'reveal') {
    const el = document.getElementById('step-' + m.step);
    if (el) { el.scrollIntoView({ block: 'center' }); el.classList.add('flash'); setTimeout(() => el.classList.remove('flash'), 1200); }
  }
});
document.addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-action]');
  if (!b) return;
  vscode.postMessage({ action: b.dataset.action, step: b.dataset.step ? Number(b.dataset.step) : undefined, approval: b.dataset.approval, session: b.dataset.session, sha256: b.dataset.sha256 });
});
vscode.postMessage({ action: 'ready' });
`;

/** The page; the body arrives by `postMessage({type: 'render', html})` (and `initial`), image
 * bytes by `postMessage({type: 'images', images: {sha256: dataUrl}})`. Images only from `data:`
 * URLs (nothing remote, nothing from disk). */
export function transcriptPage(o: { nonce: string; cspSource: string; title: string; initial: string; sessionId: string }): string {
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src ${o.cspSource} 'unsafe-inline'; script-src 'nonce-${o.nonce}';">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${o.title.replace(/[<&]/g, "")}</title>
<style>${TRANSCRIPT_CSS}</style></head>
<body data-session="${o.sessionId.replace(/[^A-Za-z0-9_.-]/g, "")}"><main id="main">${o.initial}</main>
<script nonce="${o.nonce}">${TRANSCRIPT_SCRIPT}</script></body></html>`;
}
