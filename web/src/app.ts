// dsh web: the page. Two views over one protocol connection (`rpc.ts`): the workspaces and
// their sessions (`#/`), and a session (`#/s/ID`) with its live transcript, the chart of its
// steps, "what the model saw" at a step with its diff, and the controls.

import {
  Methods,
  type SessionEvent,
  type SessionEventsResult,
  type SessionIdResult,
  type SessionListResult,
  type SessionObjectResult,
  type SessionRequestResult,
  type SessionRewindResult,
  type SessionSummary,
  type SessionUsageResult,
  type UsageEntry,
} from "../../editors/vscode/src/protocol.generated";
import { element } from "./dom";
import { StepChart } from "./chart";
import { takeSecret } from "./login";
import { type ConnectionState, Rpc, RpcError, socketUrl } from "./rpc";
import { renderDiff, renderReadable, renderWire, type SawView } from "./saw";
import { Transcript } from "./transcript";

/** Events per page of `session/events` (`?page=N` in the address, 10 to 5,000, changes it). */
const PAGE = Math.min(5000, Math.max(10, Number(new URLSearchParams(location.search).get("page")) || 400));

// Before the router reads the address's fragment: the login's secret leaves it.
takeSecret();
const rpc = new Rpc(socketUrl());

function button(label: string, className: string, onClick: () => void): HTMLButtonElement {
  const node = element("button", className, label);
  node.type = "button";
  node.addEventListener("click", onClick);
  return node;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function ago(ms: number): string {
  const seconds = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (seconds < 60) {
    return `${seconds}s ago`;
  }
  if (seconds < 3600) {
    return `${Math.round(seconds / 60)} min ago`;
  }
  if (seconds < 86400) {
    return `${Math.round(seconds / 3600)} h ago`;
  }
  return new Date(ms).toLocaleString();
}

const CONNECTION_TEXT: Record<ConnectionState, string> = {
  open: "",
  connecting: "connecting to the dsh daemon…",
  closed: "connection lost: reconnecting…",
  refused: "This tab is not logged in to the dsh daemon (no login secret, or one from an older link): run `dsh web` again in a terminal and open the link it prints.",
};

const app = document.getElementById("app") ?? document.body;
const banner = element("div", "connection");
banner.setAttribute("role", "status");
banner.setAttribute("data-testid", "connection");
rpc.onState((state) => {
  banner.dataset.state = state;
  banner.textContent = CONNECTION_TEXT[state];
});

/** The view on screen: its teardown. */
let teardown: (() => void) | undefined;

function route(): void {
  teardown?.();
  teardown = undefined;
  const match = /^#\/s\/([^/]+)$/.exec(location.hash);
  app.replaceChildren(banner);
  if (match?.[1]) {
    teardown = sessionView(decodeURIComponent(match[1]));
  } else {
    teardown = listView();
  }
}

// ---- the list of workspaces and sessions ----

function listView(): () => void {
  const root = element("main", "list-view");
  const header = element("header", "bar");
  header.append(element("h1", undefined, "dsh sessions"));
  const wanted = new URLSearchParams(location.search).get("workspace");
  const body = element("div", "workspaces");
  root.append(header, body);
  app.append(root);
  let stopped = false;
  const load = async () => {
    try {
      const result = await rpc.request<SessionListResult>(Methods.SessionList, {});
      if (!stopped) {
        renderList(body, result.sessions, wanted);
      }
    } catch (error) {
      body.replaceChildren(element("p", "error", `cannot list sessions: ${message(error)}`));
    }
  };
  void load();
  const timer = setInterval(() => void load(), 3000);
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}

function renderList(body: HTMLElement, sessions: SessionSummary[], wanted: string | null): void {
  const byWorkspace = new Map<string, SessionSummary[]>();
  for (const session of sessions) {
    const list = byWorkspace.get(session.workspace) ?? [];
    list.push(session);
    byWorkspace.set(session.workspace, list);
  }
  const workspaces = [...byWorkspace.keys()].sort((a, b) => (a === wanted ? -1 : b === wanted ? 1 : a.localeCompare(b)));
  const sections: HTMLElement[] = [];
  if (!workspaces.length) {
    sections.push(element("p", "empty", "No sessions yet. Start one with dsh prompt, an editor, or below."));
  }
  for (const workspace of workspaces) {
    const section = element("section", "workspace");
    section.append(element("h2", undefined, workspace));
    const table = element("table", "sessions");
    const head = element("tr");
    for (const title of ["session", "model", "cost", "steps", "last activity", "state"]) {
      head.append(element("th", undefined, title));
    }
    table.append(head);
    const rows = (byWorkspace.get(workspace) ?? []).sort((a, b) => b.updatedMs - a.updatedMs);
    for (const session of rows) {
      const row = element("tr", session.error ? "broken" : session.running ? "running" : "");
      row.dataset.session = session.sessionId;
      const name = element("td");
      const link = element("a", undefined, session.title ?? "(no prompt yet)");
      link.href = `#/s/${encodeURIComponent(session.sessionId)}`;
      name.append(link, element("div", "id", session.sessionId));
      if (session.error) {
        name.append(element("div", "error", `unreadable: ${session.error}`));
      }
      row.append(
        name,
        element("td", undefined, session.model ? `${session.profile ? `${session.profile}/` : ""}${session.model}` : "–"),
        element("td", "num", session.cost ? `${session.cost.amount.toFixed(4)} ${session.cost.currency}` : "–"),
        element("td", "num", String(session.steps)),
        element("td", undefined, ago(session.updatedMs)),
        element("td", "state", session.error ? "unreadable" : session.running ? "running" : "idle"),
      );
      table.append(row);
    }
    section.append(table);
    sections.push(section);
  }
  body.replaceChildren(...sections);
}

// ---- one session ----

/** The media types an image may have (the daemon's intake checks the bytes against them). */
const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

/** Images fetched, as `data:` URLs by hash (an image is the same bytes in every session that
 * names it), at most this many; a failure is not kept, so it is asked again next time. */
const images = new Map<string, Promise<string>>();
const MAX_IMAGES = 64;

function imageSource(sessionId: string, sha256: string): Promise<string> {
  const known = images.get(sha256);
  if (known) {
    return known;
  }
  const source = rpc.request<SessionObjectResult>(Methods.SessionObject, { sessionId, sha256 }).then((object) => {
    if (!IMAGE_TYPES.has(object.mediaType)) {
      throw new Error(`not an image (${object.mediaType})`);
    }
    return `data:${object.mediaType};base64,${object.data}`;
  });
  images.set(sha256, source);
  source.catch(() => {
    if (images.get(sha256) === source) {
      images.delete(sha256);
    }
  });
  for (const oldest of images.keys()) {
    if (images.size <= MAX_IMAGES) {
      break;
    }
    images.delete(oldest);
  }
  return source;
}

function sessionView(sessionId: string): () => void {
  const root = element("main", "session-view");
  const header = element("header", "bar");
  const back = element("a", "back", "← sessions");
  back.href = "#/";
  const title = element("h1", undefined, sessionId);
  const status = element("span", "status", "");
  status.setAttribute("data-testid", "status");
  header.append(back, title, status);

  const transcript = new Transcript({
    approve: (approvalId, decision) => {
      rpc.request(Methods.ApprovalRespond, { sessionId, approvalId, decision }).catch((error) => say(`approval: ${message(error)}`));
    },
    pickStep: (step) => {
      chart.select(step);
      void openSaw(step);
    },
    image: (sha256) => imageSource(sessionId, sha256),
  });
  const earlier = button("load earlier events", "earlier", () => void loadEarlier());
  earlier.hidden = true;
  transcript.onTrim = () => {
    earlier.hidden = false;
  };
  const left = element("div", "left");
  left.append(earlier, transcript.element);

  let selectedStep: number | undefined;
  const chart = new StepChart({
    onSelect: (row: UsageEntry) => {
      selectedStep = row.step;
      stepLabel.textContent = `step ${row.step}`;
    },
    onOpen: (row: UsageEntry) => void openSaw(row.step),
  });
  const saw = element("section", "saw");
  saw.setAttribute("aria-label", "what the model saw");
  const sawTabs = element("div", "tabs");
  sawTabs.setAttribute("role", "tablist");
  const sawBody = element("div", "saw-body");
  sawBody.tabIndex = 0;
  saw.append(sawTabs, sawBody);
  let sawResult: SessionRequestResult | undefined;
  let sawView: SawView = "readable";
  const tabs: Record<SawView, HTMLButtonElement> = {
    readable: button("what the model saw", "tab", () => showSaw("readable")),
    wire: button("wire JSON", "tab", () => showSaw("wire")),
    diff: button("diff vs previous step", "tab", () => showSaw("diff")),
  };
  for (const tab of Object.values(tabs)) {
    tab.setAttribute("role", "tab");
    sawTabs.append(tab);
  }
  const sawTitle = element("span", "saw-title", "pick a step in the chart or the transcript");
  sawTabs.append(sawTitle);
  const right = element("div", "right");
  right.append(chart.element, saw);

  // Controls.
  const controls = element("form", "controls");
  controls.setAttribute("aria-label", "controls");
  const text = element("textarea");
  text.rows = 2;
  text.placeholder = "Prompt (Ctrl+Enter); while a turn runs it steers the next request";
  text.setAttribute("aria-label", "prompt or steering text");
  const send = button("Send", "primary send", () => void submit());
  const cancel = button("Cancel turn", "cancel", () => void act("cancel", () => rpc.request(Methods.SessionCancel, { sessionId })));
  const compact = button("Compact", "compact", () =>
    void act("compact", async () => {
      const result = await rpc.request<{ message: string }>(Methods.SessionCompact, { sessionId });
      say(result.message);
    }),
  );
  const stepLabel = element("span", "step-label", "no step picked");
  const fork = button("Fork at step", "fork", () =>
    void act("fork", async () => {
      if (selectedStep === undefined) {
        throw new Error("pick a step first (chart or transcript)");
      }
      const result = await rpc.request<SessionIdResult>(Methods.SessionFork, { sessionId, atStep: selectedStep });
      location.hash = `#/s/${encodeURIComponent(result.sessionId)}`;
    }),
  );
  const rewind = button("Rewind to step", "rewind", () =>
    void act("rewind", async () => {
      if (selectedStep === undefined) {
        throw new Error("pick a step first (chart or transcript)");
      }
      const plan = await rpc.request<SessionRewindResult>(Methods.SessionRewind, { sessionId, step: selectedStep, dryRun: true });
      const files = plan.restored.length + plan.created.length + plan.deleted.length;
      if (!confirm(`Rewind to step ${selectedStep}? ${files} files change; the conversation continues in a fork.`)) {
        return;
      }
      const done = await rpc.request<SessionRewindResult>(Methods.SessionRewind, { sessionId, step: selectedStep });
      location.hash = `#/s/${encodeURIComponent(done.sessionId)}`;
    }),
  );
  const notice = element("output", "notice");
  notice.setAttribute("aria-live", "polite");
  controls.append(text, send, cancel, compact, stepLabel, fork, rewind, notice);
  controls.addEventListener("submit", (event) => {
    event.preventDefault();
    void submit();
  });
  text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      void submit();
    }
  });

  root.append(header, left, right, controls);
  app.append(root);

  let running = false;
  let stopped = false;
  let subscription: unknown;
  const setRunning = (value: boolean) => {
    running = value;
    status.textContent = value ? "running" : "idle";
    status.dataset.running = String(value);
    send.textContent = value ? "Steer" : "Send";
    cancel.disabled = !value;
  };
  setRunning(false);

  function say(text: string): void {
    notice.textContent = text;
  }

  async function act(what: string, run: () => Promise<unknown>): Promise<void> {
    try {
      await run();
    } catch (error) {
      say(`${what}: ${message(error)}`);
    }
  }

  async function submit(): Promise<void> {
    const value = text.value.trim();
    if (!value) {
      return;
    }
    text.value = "";
    if (running) {
      await act("steer", async () => {
        await rpc.request(Methods.SessionInject, { sessionId, text: value });
        say("steering sent: it joins the next request");
      });
      return;
    }
    setRunning(true);
    rpc.request<{ stopReason: string }>(Methods.SessionPrompt, { sessionId, text: value, whenBusy: "queue" }).then(
      (result) => say(`turn ended: ${result.stopReason}`),
      (error) => say(`prompt: ${message(error)}`),
    );
  }

  function showSaw(view: SawView): void {
    sawView = view;
    for (const [name, tab] of Object.entries(tabs)) {
      tab.setAttribute("aria-selected", String(name === view));
    }
    if (!sawResult) {
      sawBody.replaceChildren(element("p", "saw-meta", "Pick a step: click a bar in the chart (or focus it and use ←/→, Enter), or a step's button in the transcript."));
      return;
    }
    sawBody.replaceChildren(view === "readable" ? renderReadable(sawResult) : view === "wire" ? renderWire(sawResult) : renderDiff(sawResult));
  }

  async function openSaw(step: number): Promise<void> {
    selectedStep = step;
    stepLabel.textContent = `step ${step}`;
    sawTitle.textContent = `step ${step}: loading…`;
    try {
      sawResult = await rpc.request<SessionRequestResult>(Methods.SessionRequest, { sessionId, step, diff: true });
      sawTitle.textContent = `step ${step}`;
      saw.dataset.step = String(step);
      showSaw(sawView);
    } catch (error) {
      sawTitle.textContent = `step ${step}: ${message(error)}`;
    }
  }

  // Usage, redrawn at most every 400 ms while steps end.
  let usageTimer: ReturnType<typeof setTimeout> | undefined;
  const refreshUsage = () => {
    if (usageTimer) {
      return;
    }
    usageTimer = setTimeout(async () => {
      usageTimer = undefined;
      try {
        const usage = await rpc.request<SessionUsageResult>(Methods.SessionUsage, { sessionId });
        if (!stopped) {
          chart.update(usage);
          title.textContent = `${sessionId} · ${usage.profile}/${usage.model}${usage.cost ? ` · ${usage.cost.amount.toFixed(4)} ${usage.cost.currency}` : ""}`;
        }
      } catch (error) {
        say(`usage: ${message(error)}`);
      }
    }, 0);
  };

  const onEvent = (event: SessionEvent) => {
    transcript.append([event]);
    switch (event.type) {
      case "turn/start":
        setRunning(true);
        break;
      case "turn/end":
        setRunning(false);
        refreshUsage();
        break;
      case "step/end":
      case "step/error":
        refreshUsage();
        break;
      default:
        break;
    }
  };
  const unlisten = rpc.onNotification(Methods.SessionEvent, (params) => {
    const { subscription: id, result } = params as { subscription: unknown; result: SessionEvent };
    if (id === subscription && result.sessionId === sessionId) {
      onEvent(result);
    }
  });

  async function loadEarlier(): Promise<void> {
    const before = transcript.firstSeq;
    const from = Math.max(0, before - PAGE);
    const page = await rpc.request<SessionEventsResult>(Methods.SessionEvents, { sessionId, fromSeq: from, limit: before - from });
    transcript.prepend(page.events);
    earlier.hidden = from === 0;
  }

  /** The last page of events, then live ones from the seq after it (again after a reconnect). */
  async function attach(): Promise<void> {
    try {
      if (transcript.lastSeq < 0) {
        const probe = await rpc.request<SessionEventsResult>(Methods.SessionEvents, { sessionId, fromSeq: 0, limit: 1 });
        const from = Math.max(0, probe.length - PAGE);
        const page = await rpc.request<SessionEventsResult>(Methods.SessionEvents, { sessionId, fromSeq: from, limit: PAGE });
        transcript.append(page.events);
        earlier.hidden = from === 0;
        // Whether a turn runs: the page's last turn boundary says; without one in the page,
        // the session list does.
        const boundary = [...page.events].reverse().find((event) => event.type === "turn/start" || event.type === "turn/end");
        if (boundary) {
          setRunning(boundary.type === "turn/start");
        } else {
          const list = await rpc.request<SessionListResult>(Methods.SessionList, {});
          setRunning(list.sessions.find((session) => session.sessionId === sessionId)?.running ?? false);
        }
      }
      refreshUsage();
      subscription = await rpc.request(Methods.SessionSubscribe, { sessionId, fromSeq: transcript.lastSeq + 1 });
    } catch (error) {
      if (!(error instanceof RpcError && error.code === -32099)) {
        say(`cannot open the session: ${message(error)}`);
      }
    }
  }
  const unstate = rpc.onState((state, reconnected) => {
    if (state === "open" && reconnected && !stopped) {
      void attach();
    }
  });
  void attach();

  const keys = (event: KeyboardEvent) => {
    if (event.key === "Escape" && document.activeElement === text) {
      text.blur();
    } else if (event.key === "/" && document.activeElement === document.body) {
      event.preventDefault();
      text.focus();
    }
  };
  document.addEventListener("keydown", keys);
  showSaw("readable");

  return () => {
    stopped = true;
    unlisten();
    unstate();
    document.removeEventListener("keydown", keys);
    if (subscription !== undefined) {
      rpc.request(Methods.SessionUnsubscribe, [subscription]).catch(() => undefined);
    }
  };
}

window.addEventListener("hashchange", route);
route();
