"""The examples run as the README shows them — scripts using `dsh` from PATH, which starts the
daemon — against the mock, and the README holds each of them as it is."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import dsh_client

from conftest import DSH, World

HERE = Path(__file__).resolve().parent.parent
EXAMPLES = HERE / "examples"


def run(world: World, example: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        world.env,
        DSH_HOME=world.home,
        DEEPSEEK_BASE_URL=world.mock.url,
        PATH=f"{os.path.dirname(DSH)}{os.pathsep}{world.env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    return subprocess.run(
        [sys.executable, str(EXAMPLES / example), *args], cwd=world.ws, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_readme_shows_each_example_as_it_is() -> None:
    readme = (HERE / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    for example in sorted(EXAMPLES.glob("*.py")):
        assert example.read_text() in blocks, f"README.md does not show {example.name} as it is"


async def test_the_quickstart_streams_the_answer_and_prints_each_steps_cost(client: dsh_client.Client, world: World) -> None:
    done = run(world, "quickstart.py", "look around [[fake:tool list_dir {}]]")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "ok: look around [[fake:tool list_dir {}]]"
    assert re.fullmatch(r"completed after 2 steps \(session \S+\)", lines[1]), lines
    assert re.fullmatch(r"step 1: 0% cached, 0\.\d{6} USD", lines[2]), lines
    assert re.fullmatch(r"step 2: \d+% cached, 0\.\d{6} USD", lines[3]), lines


async def test_the_ci_budget_fails_the_build_when_the_step_budget_runs_out(client: dsh_client.Client, world: World) -> None:
    prompt = "fix it [[fake:tool list_dir {}]]"
    over = run(world, "ci_budget.py", "--max-steps", "1", prompt)
    assert over.returncode == 1, over.stderr
    assert re.search(r"session \S+: limit after 1 steps, cost 0\.\d{4} USD", over.stdout), over.stdout
    assert "::error::the maxSteps budget (1) ran out before the agent was done" in over.stdout

    within = run(world, "ci_budget.py", "--max-steps", "5", prompt)
    assert within.returncode == 0, within.stdout + within.stderr
    assert re.search(r"session \S+: completed after 2 steps", within.stdout), within.stdout


async def test_fork_costs_forks_at_every_step_and_compares(client: dsh_client.Client, world: World) -> None:
    world.mock.script(
        *[
            {"match": {"last_user_contains": "tok-forks"}, **step}
            for step in (
                {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
                {"tool_calls": [{"name": "glob", "arguments": {"pattern": "*"}}]},
                {"content": "looked"},
            )
        ]
    )
    parent = await client.create(world.ws)
    assert (await client.prompt(parent, "look twice tok-forks")).steps == 3
    done = run(world, "fork_costs.py", parent, "and now? [[fake:say fine]]")
    assert done.returncode == 0, done.stderr
    header, *rows, cheapest = done.stdout.splitlines()
    assert header.split() == ["fork", "at", "session", "steps", "1st", "hit", "cost", "saved"]
    assert [row.split()[0] for row in rows] == ["1", "2", "3"]
    # Every fork's first request starts with what the parent sent before that step: cached.
    assert all(int(row.split()[3].rstrip("%")) > 0 for row in rows), rows
    assert re.fullmatch(r"cheapest: the fork at step \d \(0\.\d{6}\)", cheapest)
    forks = [row.split()[1] for row in rows]
    assert all(summary.forked_from and summary.forked_from.session_id == parent
               for summary in await client.list(world.ws) if summary.session_id in forks)
