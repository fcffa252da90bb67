// Tools from MCP servers as the transcript names them, and the line a step's wait for starting
// MCP servers shows. No `vscode`.
//
// An MCP tool reaches the model, and the log, as `SERVER__TOOL` (docs/mcp.md): a server name is
// 1 to 32 letters, digits or `-` — never `_` — so the first `__` ends it, and no built-in tool
// has a `__`. The transcript shows the tool's own name with its server beside it.
import type { McpWait } from "./protocol.generated";

export type { McpWait };

/** The server and the server's own tool name of an MCP tool's request name; undefined for a
 * built-in tool (or any name that does not read as `SERVER__TOOL`). */
export function mcpTool(name: unknown): { server: string; tool: string } | undefined {
  // Events come from a log: a malformed one (no tool name) must not break the transcript.
  if (typeof name !== "string") {
    return undefined;
  }
  const at = name.indexOf("__");
  if (at < 1) {
    return undefined;
  }
  const server = name.slice(0, at);
  const tool = name.slice(at + 2);
  return /^[A-Za-z0-9-]{1,32}$/.test(server) && tool.length > 0 ? { server, tool } : undefined;
}

/** The badge an MCP tool carries beside its name: `MCP · fx`. */
export function mcpLabel(server: string): string {
  return `MCP · ${server}`;
}

/** How a tool reads on one line: `echo (MCP · fx)` for an MCP tool, the name for a built-in. */
export function toolDisplayName(name: string): string {
  const mcp = mcpTool(name);
  return mcp ? `${mcp.tool} (${mcpLabel(mcp.server)})` : name;
}

/**
 * The one line the transcript shows for an `mcp/wait`: "waiting for MCP server fx to start",
 * "waiting for MCP servers fx, gy to list their changed tools". It needs no "done": the step that
 * follows shows that the wait ended.
 */
export function mcpWaitText(w: McpWait): string {
  const many = w.servers.length !== 1;
  const who = w.servers.length ? `MCP server${many ? "s" : ""} ${w.servers.join(", ")}` : "MCP servers";
  switch (w.reason) {
    case "starting":
      return `waiting for ${who} to start`;
    case "toolsChanged":
      return `waiting for ${who} to list ${many ? "their" : "its"} changed tools`;
    default:
      // A reason newer than these types: named as it came.
      return `waiting for ${who} (${String(w.reason)})`;
  }
}
