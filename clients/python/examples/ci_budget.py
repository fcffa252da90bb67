"""A CI step: run a prompt on the checkout with a step budget, and fail the build when the budget
runs out before the agent is done (or the turn fails). Every step's request is audited too.

    python ci_budget.py --max-steps 30 "make the failing test pass"

The budget is `maxSteps` of the session's config: the turn stops after that many model requests
with the stop reason `maxSteps`.
"""

import argparse
import asyncio
import os
import sys

import dsh_client
from dsh_client.protocol import ApprovalChoice, ApprovalRequestEvent, SessionConfig


def approve(event: ApprovalRequestEvent) -> ApprovalChoice:
    # A disposable CI checkout: edits and sandboxed commands may run; nothing runs unconfined.
    return "allow"


async def main(prompt: str, max_steps: int) -> int:
    async with dsh_client.connect(base_url=os.environ.get("DEEPSEEK_BASE_URL")) as client:
        session = await client.create(os.getcwd(), config=SessionConfig(max_steps=max_steps))
        result = await client.prompt(session, prompt, on_approval=approve)
        usage = await client.usage(session)
        audit = await client.audit(session)
    cost = f"{usage.cost.amount:.4f} {usage.cost.currency}" if usage.cost else "unknown"
    print(f"session {session}: {result.stop_reason} after {result.steps} steps, cost {cost}")
    if not audit.ok:
        print(f"::error::the audit of {session} failed: {audit.mismatches + audit.errors}")
        return 1
    if result.stop_reason == "maxSteps":
        print(f"::error::the step budget ({max_steps}) ran out before the agent was done")
        return 1
    if result.stop_reason != "completed":
        print(f"::error::the turn ended with {result.stop_reason}: {result.error or ''}")
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt")
    parser.add_argument("--max-steps", type=int, default=30)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.prompt, args.max_steps)))
