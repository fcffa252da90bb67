"""A small MCP server written with the real PyPI `mcp` SDK (low-level server, stdio), for dsh's
MCP tests. Its behaviour is chosen by its first argument:

  tools      tools `echo` and `grow`; calling `grow` adds a tool `extra` and sends
             notifications/tools/list_changed; `die` exits the process at once (a crash
             mid-call); `big` returns a 10 MB text; `slow` sleeps for 30 s (a call timeout;
             a cancellation is written to $FIXTURE_CANCELLED);
             `fail` returns a result with isError true; `image` returns an image block.
  garbage    prints a line that is not JSON-RPC on stdout, then exits
  hang       never answers `initialize`
  badschema  lists a tool whose inputSchema is a string, not an object
  badname    lists a tool whose name providers refuse (`has space`) beside a good one

Every start appends a line to the file named by $FIXTURE_STARTS (when set), so a test can count
restarts. $FIXTURE_START_DELAY (seconds) delays its start (a slow server: `initialize` is
answered that much later); $FIXTURE_LIST_DELAY (seconds) delays `tools/list` once `grow` was
called (a slow refresh after notifications/tools/list_changed). $FIXTURE_SECRET, when set in the daemon's environment, must never reach this process:
the server reports whether it sees it through the `env` tool.
"""

import os
import sys

import anyio
import mcp.types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

mode = sys.argv[1] if len(sys.argv) > 1 else "tools"
starts = os.environ.get("FIXTURE_STARTS")
if starts:
    with open(starts, "a") as f:
        f.write(f"{os.getpid()}\n")

start_delay = float(os.environ.get("FIXTURE_START_DELAY", "0"))
if start_delay:
    import time

    time.sleep(start_delay)

if mode == "garbage":
    sys.stdout.write("this is not JSON-RPC\n")
    sys.stdout.flush()
    sys.exit(3)
if mode == "hang":
    import time

    while True:
        time.sleep(3600)

server = Server("dsh-fixture")
grown = False


def schema(properties=None):
    return {"type": "object", "properties": properties or {}}


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    if mode == "badschema":
        # Sent as the wire has it: the SDK's own type would refuse it.
        return [types.Tool.model_construct(name="odd", description="bad schema", inputSchema="string")]
    if mode == "badname":
        return [
            types.Tool(name="has space", description="refused", inputSchema=schema()),
            types.Tool(name="fine", description="kept", inputSchema=schema()),
        ]
    if grown and os.environ.get("FIXTURE_LIST_DELAY"):
        await anyio.sleep(float(os.environ["FIXTURE_LIST_DELAY"]))
    tools = [
        types.Tool(
            name="echo",
            description="Echoes its text back.",
            # Keys deliberately out of order: dsh must sort them.
            inputSchema={"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
        ),
        types.Tool(name="grow", description="Adds the tool `extra`.", inputSchema=schema()),
        types.Tool(name="die", description="Exits the server.", inputSchema=schema()),
        types.Tool(name="big", description="Returns 10 MB.", inputSchema=schema()),
        types.Tool(name="slow", description="Sleeps 30 s.", inputSchema=schema()),
        types.Tool(name="fail", description="Fails.", inputSchema=schema()),
        types.Tool(name="env", description="Says which variables it sees.", inputSchema=schema()),
        types.Tool(name="image", description="Returns an image.", inputSchema=schema()),
    ]
    if grown:
        tools.append(types.Tool(name="extra", description="Added by grow.", inputSchema=schema()))
    return tools


@server.call_tool(validate_input=False)
async def call_tool(name: str, arguments: dict) -> list[types.ContentBlock] | types.CallToolResult:
    global grown
    if name == "echo":
        return [types.TextContent(type="text", text=f"echo: {arguments.get('text', '')}")]
    if name == "grow":
        grown = True
        await server.request_context.session.send_tool_list_changed()
        return [types.TextContent(type="text", text="grown")]
    if name == "die":
        os._exit(9)
    if name == "big":
        return [types.TextContent(type="text", text="x" * (10 * 1024 * 1024))]
    if name == "slow":
        try:
            await anyio.sleep(30)
        except anyio.get_cancelled_exc_class():
            # dsh gave up on the call and said so (notifications/cancelled).
            marker = os.environ.get("FIXTURE_CANCELLED")
            if marker:
                with open(marker, "a") as f:
                    f.write("slow cancelled\n")
            raise
        return [types.TextContent(type="text", text="late")]
    if name == "fail":
        return types.CallToolResult(content=[types.TextContent(type="text", text="it failed")], isError=True)
    if name == "env":
        seen = "FIXTURE_SECRET" in os.environ
        return [types.TextContent(type="text", text=f"secret visible: {seen}; FIXTURE_GIVEN={os.environ.get('FIXTURE_GIVEN')}")]
    if name == "image":
        return [types.ImageContent(type="image", data="aGVsbG8=", mimeType="image/png")]
    if name == "extra":
        return [types.TextContent(type="text", text="extra ran")]
    raise ValueError(f"unknown tool {name}")


async def main():
    async with stdio_server() as (read, write):
        options = server.create_initialization_options(
            notification_options=NotificationOptions(tools_changed=True)
        )
        await server.run(read, write, options)


anyio.run(main)
