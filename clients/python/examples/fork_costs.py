"""Forks a session at every step, runs the same follow-up prompt in each fork, and compares what
each costs: a fork's first request reuses the parent's cached prefix, so forking late is cheap.

    python fork_costs.py SESSION "now write the tests"
"""

import asyncio
import os
import sys

import dsh_client


async def main(parent: str, prompt: str) -> None:
    async with dsh_client.connect(base_url=os.environ.get("DEEPSEEK_BASE_URL")) as client:
        steps = len((await client.usage(parent)).rows)
        print(f"{'fork at':>7}  {'session':<22}  {'steps':>5}  {'1st hit':>7}  {'cost':>10}  {'saved':>10}")
        costs = []
        for step in range(1, steps + 1):
            fork = await client.fork(parent, at_step=step)
            result = await client.prompt(fork, prompt, on_approval=lambda event: "deny")
            # The fork's own steps: those from the fork point on (the ones before are the parent's).
            rows = [row for row in (await client.usage(fork)).rows if row.step >= step]
            cost = sum(row.cost.amount for row in rows if row.cost)
            saved = sum(row.cost.saved for row in rows if row.cost)
            costs.append((cost, step))
            print(f"{step:>7}  {fork:<22}  {result.steps:>5}  {rows[0].hit_percent:>6.0f}%  {cost:>10.6f}  {saved:>10.6f}")
        cheapest, at = min(costs)
        print(f"cheapest: the fork at step {at} ({cheapest:.6f})")


asyncio.run(main(sys.argv[1], " ".join(sys.argv[2:]) or "Summarize what you did."))
