"""Runs a prompt in the current directory, shows the answer as it streams, and prints each step's cost."""

import asyncio
import os
import sys

import dsh_client
from dsh_client.protocol import ApprovalChoice, ApprovalRequestEvent, AssistantChunkEvent, ChunkDeltaText, SessionEvent


def show(event: SessionEvent) -> None:
    if isinstance(event, AssistantChunkEvent) and isinstance(event.data.delta, ChunkDeltaText):
        print(event.data.delta.text, end="", flush=True)


def approve(event: ApprovalRequestEvent) -> ApprovalChoice:
    return "allow" if event.data.tool in ("write_file", "edit_file") else "deny"  # edits yes, commands no


async def main(prompt: str) -> None:
    async with dsh_client.connect(base_url=os.environ.get("DEEPSEEK_BASE_URL")) as client:
        session = await client.create(os.getcwd())
        result = await client.prompt(session, prompt, on_approval=approve, on_event=show)
        print(f"\n{result.stop_reason} after {result.steps} steps (session {session})")
        for row in (await client.usage(session)).rows:
            cost = f"{row.cost.amount:.6f} {row.cost.currency}" if row.cost else "no price"
            print(f"step {row.step}: {row.hit_percent:.0f}% cached, {cost}")


asyncio.run(main(" ".join(sys.argv[1:]) or "What is in this directory?"))
