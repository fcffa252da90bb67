"""A CI step: run a prompt on the checkout with budgets, and fail the build when one runs out
before the agent is done (or the turn fails). Every step's request is audited too.

    python ci_budget.py --max-steps 30 --max-cost 0.50 "make the failing test pass"

The budgets are the prompt's `limits`: the turn stops between steps once one is reached, with
the stop reason `limit` (`result.limit` says which, as the log's `turn/limit` event does).
"""

import argparse
import asyncio
import os
import sys

import dsh_client
from dsh_client.protocol import ApprovalChoice, ApprovalRequestEvent, TurnLimits


def approve(event: ApprovalRequestEvent) -> ApprovalChoice:
    # A disposable CI checkout: edits and sandboxed commands may run; nothing runs unconfined.
    return "allow"


async def main(prompt: str, max_steps: int, max_cost: float | None) -> int:
    async with dsh_client.connect(base_url=os.environ.get("DEEPSEEK_BASE_URL")) as client:
        session = await client.create(os.getcwd())
        limits = TurnLimits(max_steps=max_steps, max_cost=max_cost)
        result = await client.prompt(session, prompt, on_approval=approve, limits=limits)
        usage = await client.usage(session)
        audit = await client.audit(session)
    cost = f"{usage.cost.amount:.4f} {usage.cost.currency}" if usage.cost else "unknown"
    print(f"session {session}: {result.stop_reason} after {result.steps} steps, cost {cost}")
    if not audit.ok:
        print(f"::error::the audit of {session} failed: {audit.mismatches + audit.errors}")
        return 1
    if result.stop_reason == "limit" and result.limit is not None:
        reached = result.limit
        print(f"::error::the {reached.limit} budget ({reached.value:g}) ran out before the agent was done")
        return 1
    if result.stop_reason != "completed":
        print(f"::error::the turn ended with {result.stop_reason}: {result.error or ''}")
        return 1
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt")
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--max-cost", type=float, default=None, help="USD")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.prompt, args.max_steps, args.max_cost)))
