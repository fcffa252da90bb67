"""The LSP front driven by pytest-lsp (PyPI): `dsh lsp` over stdio, against a real daemon (started
on demand by the front) and the mock provider (`dsh mock`).

A scripted turn, run through `workspace/executeCommand dsh.prompt`, writes a file and edits it
(the write asks for approval, answered through `window/showMessageRequest`); `$/progress`
reports its steps and `window/showMessage` its end. Then, on the open document: hover on each
agent line names the step that wrote it; lines edited by hand (unsaved) lose their attribution
and an inserted line shifts the rest; code lenses mark the agent hunks and are refreshed when
the text or the log changes; `dsh.saw` opens a read-only document whose content equals `dsh
saw`; a turn another client starts reports through `$/progress` too; cancel stops a running
turn. Bad input: documents outside the workspace and binary ones get nothing and no message, an
unreadable log gets one clear message (the server stays up), an unknown command an error.
`dsh.rewind` asks with the files it changes (`window/showMessageRequest`), does nothing when
cancelled, refuses files the user changed unless told to overwrite them, restores the files and
continues the conversation in a fork that takes the next prompt.

The tests share one front, in file order: each builds on what the previous left.
"""

import asyncio
import glob
import json
import os
import stat
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

DSH = os.environ["DSH_BIN"]


class Env:
    """The mock provider, a private dsh home and a workspace."""

    def __init__(self):
        self.mock = subprocess.Popen([DSH, "mock", "--port", "0"], stdout=subprocess.PIPE, text=True)
        line = self.mock.stdout.readline()
        self.url = line[line.index("http://") :].split()[0].rstrip(".,")
        self.root = tempfile.mkdtemp(prefix="dsh-lsp.")
        self.home = os.path.join(self.root, "home")
        self.ws = os.path.realpath(os.path.join(self.root, "ws"))
        os.makedirs(self.ws)
        self.env = dict(os.environ, DSH_HOME=self.home, DEEPSEEK_API_KEY="sk-test")

    def argv(self, *args):
        return [DSH, "--base-url", self.url, *args]

    def run(self, *args):
        return subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True, check=True)

    def script(self, replies):
        request = urllib.request.Request(
            self.url + "/_fake/script",
            data=json.dumps(replies).encode(),
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request) as answer:
            answer.read()

    def stop(self):
        subprocess.run(self.argv("shutdown"), env=self.env, capture_output=True)
        self.mock.terminate()
        self.mock.wait()


ENV = Env()
APP = os.path.join(ENV.ws, "app.py")
URI = Path(APP).as_uri()
# What the agent writes (step 1), then edits (step 2): lines 2-3 are replaced by three lines.
WRITTEN = "import sys\n\ndef main():\n    print('hello')\n    return 0\n\nif __name__ == '__main__':\n    sys.exit(main())\n"
OLD = "    print('hello')\n    return 0\n"
NEW = "    name = sys.argv[1]\n    print(f'hello {name}')\n    return len(name)\n"
EDITED = WRITTEN.replace(OLD, NEW)
# Line → the step that wrote it, once the turn is done.
STEPS = [1, 1, 1, 2, 2, 2, 1, 1, 1]

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module", autouse=True)
def environment():
    yield ENV
    ENV.stop()


@pytest_lsp.fixture(
    scope="module",
    config=ClientServerConfig(server_command=ENV.argv("lsp"), server_env=ENV.env),
)
async def client(lsp_client: LanguageClient):
    lsp_client.refreshes = 0
    lsp_client.approvals = []

    @lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)
    def code_lens_refresh(params):
        lsp_client.refreshes += 1

    # The answers to questions that are not approvals (a rewind's), in order: an action's title.
    lsp_client.answers = []
    lsp_client.questions = []

    @lsp_client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    def show_message_request(params: types.ShowMessageRequestParams):
        if params.message.startswith("dsh asks to run"):
            lsp_client.approvals.append(params)
            return next(a for a in params.actions if a.title == "Allow")
        lsp_client.questions.append(params)
        title = lsp_client.answers.pop(0)
        return next(a for a in params.actions if a.title == title)

    await lsp_client.initialize_session(
        types.InitializeParams(
            # VS Code's capabilities and name: it follows `command:` links in hovers.
            capabilities=client_capabilities("visual-studio-code"),
            client_info=types.ClientInfo(name="Visual Studio Code", version="1.65.2"),
            root_uri=Path(ENV.ws).as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=Path(ENV.ws).as_uri(), name="ws")],
        )
    )
    yield
    await lsp_client.shutdown_session()


async def wait_for(predicate, what, timeout=20.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def hover_text(client, line, uri=URI):
    hover = await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=line, character=0))
    )
    return None if hover is None else hover.contents.value


async def hover_steps(client, lines):
    steps = []
    for line in range(lines):
        text = await hover_text(client, line)
        if text is None:
            steps.append(None)
        else:
            steps.append(int(text.split("step ", 1)[1].split(" ", 1)[0]))
    return steps


def turn_ends(client):
    return [m.message for m in client.messages if " ended (" in m.message]


SESSION = {}


async def test_a_prompt_runs_a_turn_that_writes_and_edits_with_progress_and_an_end_message(client):
    ENV.script(
        [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "app.py", "content": WRITTEN}}]},
            {"tool_calls": [{"name": "edit_file", "arguments": {"path": "app.py", "old_string": OLD, "new_string": NEW}}]},
            {"content": "Done: app.py greets by name."},
        ]
    )
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="dsh.prompt", arguments=[{"text": "write the app\nthen make it greet", "new": True}])
    )
    SESSION["id"] = result["sessionId"]
    await wait_for(lambda: turn_ends(client), "the turn's end message")
    assert turn_ends(client) == [f"dsh: turn 1 of {SESSION['id']} ended (completed)"]
    assert Path(APP).read_text() == EDITED
    # The write asked for approval (the edit too); both were answered through the editor.
    assert [a.message.split(":")[0] for a in client.approvals] == ["dsh asks to run write_file", "dsh asks to run edit_file"]
    # One progress: begin, a report per step start and end, end.
    (reports,) = [r for r in client.progress_reports.values() if r]
    assert reports[0].kind == "begin" and reports[-1].kind == "end", reports
    messages = [r.message for r in reports if r.kind == "report"]
    assert messages[0] == "step 1", messages
    assert any(m.startswith("step 1 · ") and "prompt tokens" in m for m in messages), messages
    assert any(m.startswith("step 3 · ") for m in messages), messages


async def test_hover_on_each_agent_line_names_the_step_that_wrote_it(client):
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=URI, language_id="python", version=1, text=EDITED)
        )
    )
    assert await hover_steps(client, len(STEPS)) == STEPS
    text = await hover_text(client, 3)
    assert "step 2 wrote this line" in text, text
    assert f"`{SESSION['id']}`" in text and "turn 1: write the app" in text, text
    assert "model: deepseek/deepseek-v4-flash" in text and "% cached" in text, text
    assert "`edit_file`" in text and f"dsh saw {SESSION['id']} --step 2" in text, text
    link = "command:dsh.saw?" + urllib.parse.quote(json.dumps([{"sessionId": SESSION["id"], "step": 2}], separators=(",", ":")), safe="")
    assert f"[Open what the model saw at step 2]({link})" in text, text


async def test_code_lenses_mark_the_agent_hunks(client):
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=URI))
    )
    marks = [(lens.range.start.line, lens.command.title.rsplit(" · ", 1)[0]) for lens in lenses]
    assert marks == [(0, "dsh · step 1"), (3, "dsh · step 2"), (6, "dsh · step 1")], marks
    assert all(lens.command.title.endswith("% cached") for lens in lenses)
    assert lenses[1].command.command == "dsh.saw"
    assert list(lenses[1].command.arguments) == [{"sessionId": SESSION["id"], "step": 2}]


async def test_unsaved_edits_move_and_drop_attribution_and_refresh_the_lenses(client):
    refreshes = client.refreshes
    # By hand, unsaved: a line inserted above everything, and one agent line rewritten.
    lines = EDITED.split("\n")
    lines[4] = "    print('hi', name)"
    text = "# edited by hand\n" + "\n".join(lines)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )
    expected = [None] + STEPS
    expected[5] = None
    assert await hover_steps(client, len(expected)) == expected
    await wait_for(lambda: client.refreshes > refreshes, "a code lens refresh after the edit")
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=URI))
    )
    assert [lens.range.start.line for lens in lenses] == [1, 4, 6, 7], [l.command.title for l in lenses]


async def test_what_the_model_saw_opens_a_read_only_document_equal_to_dsh_saw(client):
    result = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="dsh.saw", arguments=[{"sessionId": SESSION["id"], "step": 2}])
    )
    await wait_for(lambda: client.shown_documents, "window/showDocument")
    shown = client.shown_documents[-1]
    assert shown.uri == result["uri"]
    path = Path(result["path"])
    assert shown.uri == path.as_uri()
    assert path.is_relative_to(ENV.home), path
    assert stat.S_IMODE(path.stat().st_mode) == 0o400
    assert path.read_text() == ENV.run("saw", SESSION["id"], "--step", "2").stdout


async def test_steer_fork_and_cancel_reach_the_session(client):
    steered = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="dsh.steer", arguments=["use argparse next time"])
    )
    assert steered["sessionId"] == SESSION["id"] and steered["seq"] > 0
    log = glob.glob(os.path.join(ENV.home, "workspaces", "*", "sessions", SESSION["id"] + ".jsonl"))[0]
    assert "use argparse next time" in Path(log).read_text()
    forked = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="dsh.fork", arguments=[{"sessionId": SESSION["id"], "step": 2}])
    )
    assert forked["sessionId"] != SESSION["id"]
    sessions = json.loads(ENV.run("--json", "sessions", "--workspace", ENV.ws).stdout)["sessions"]
    (fork,) = [s for s in sessions if s["sessionId"] == forked["sessionId"]]
    assert fork["forkedFrom"]["sessionId"] == SESSION["id"], fork
    cancelled = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="dsh.cancel", arguments=[{"sessionId": SESSION["id"]}])
    )
    assert cancelled == {"sessionId": SESSION["id"], "cancelled": False}


async def test_documents_outside_the_workspace_and_binary_ones_get_nothing_and_no_message(client):
    messages = len(client.messages)
    outside = Path(ENV.root) / "outside.py"
    outside.write_text(WRITTEN)
    binary = Path(ENV.ws) / "blob.bin"
    for path, text in [(outside, WRITTEN), (binary, "\0\0binary\0")]:
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=path.as_uri(), language_id="text", version=1, text=text)
            )
        )
        assert await hover_text(client, 0, uri=path.as_uri()) is None
        lenses = await client.text_document_code_lens_async(
            types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=path.as_uri()))
        )
        assert not lenses
    assert len(client.messages) == messages, client.messages[messages:]


async def test_an_unreadable_log_gets_one_clear_message_and_the_server_stays_up(client):
    sessions = os.path.dirname(
        glob.glob(os.path.join(ENV.home, "workspaces", "*", "sessions", SESSION["id"] + ".jsonl"))[0]
    )
    broken = os.path.join(sessions, "20260101-000000-broken.jsonl")
    Path(broken).write_text("this is not a log\n")
    # A fresh text: its attribution is asked again.
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=3),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=EDITED)],
        )
    )
    assert await hover_steps(client, len(STEPS)) == STEPS
    await hover_text(client, 0)
    warnings = [m.message for m in client.messages if "cannot be read" in m.message]
    assert len(warnings) == 1, warnings
    assert "20260101-000000-broken" in warnings[0], warnings
    os.remove(broken)


async def test_an_unknown_command_is_an_error(client):
    with pytest.raises(Exception) as failure:
        await client.workspace_execute_command_async(types.ExecuteCommandParams(command="dsh.nope", arguments=[]))
    assert "unknown command `dsh.nope`" in str(failure.value)
    # The server is still up.
    assert await hover_text(client, 0) is not None


async def test_a_turn_started_elsewhere_reports_progress_and_refreshes_the_lenses(client):
    # Another client (the CLI) runs a turn in the session; the front hears of it from the daemon
    # (`workspace/turnStarted`) and follows it. It rewrites app.py with the text the editor has:
    # every line is now that step's, so the lenses shown change and are refreshed.
    await client.text_document_code_lens_async(types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=URI)))
    refreshes, tokens, ends = client.refreshes, len(client.progress_reports), len(turn_ends(client))
    ENV.script(
        [
            {"delay_ms": 1500, "tool_calls": [{"name": "write_file", "arguments": {"path": "app.py", "content": EDITED}}]},
            {"content": "rewritten"},
        ]
    )
    cli = subprocess.Popen(ENV.argv("prompt", "--yes", "--session", SESSION["id"], "rewrite app.py"), env=ENV.env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_for(lambda: len(turn_ends(client)) > ends, "the end of the CLI's turn")
    finally:
        cli.wait(timeout=20)
    assert turn_ends(client)[-1] == f"dsh: turn 2 of {SESSION['id']} ended (completed)"
    assert len(client.progress_reports) == tokens + 1
    reports = list(client.progress_reports.values())[-1]
    assert reports[0].kind == "begin" and reports[-1].kind == "end", reports
    assert any(r.kind == "report" and r.message.startswith("step 4 · ") for r in reports), reports
    await wait_for(lambda: client.refreshes > refreshes, "a code lens refresh after the log changed")
    assert await hover_steps(client, len(STEPS)) == [4] * len(STEPS)


async def test_cancel_stops_a_running_turn(client):
    ends = len(turn_ends(client))
    ENV.script([{"delay_ms": 10000, "content": "too slow"}])
    await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="dsh.prompt", arguments=[{"text": "take your time", "sessionId": SESSION["id"]}])
    )
    cancelled = {}

    async def cancel():
        result = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="dsh.cancel", arguments=[])
        )
        cancelled.update(result)
        return result["cancelled"]

    deadline = asyncio.get_running_loop().time() + 10
    while not await cancel():
        assert asyncio.get_running_loop().time() < deadline, "the turn never ran"
        await asyncio.sleep(0.05)
    assert cancelled == {"sessionId": SESSION["id"], "cancelled": True}
    await wait_for(lambda: len(turn_ends(client)) > ends, "the cancelled turn's end")
    assert turn_ends(client)[-1].startswith(f"dsh: turn 3 of {SESSION['id']} ended (cancelled)"), turn_ends(client)


async def test_workspace_folders_can_change(client):
    folder = types.WorkspaceFolder(uri=Path(ENV.ws).as_uri(), name="ws")

    def change(added, removed):
        client.workspace_did_change_workspace_folders(
            types.DidChangeWorkspaceFoldersParams(event=types.WorkspaceFoldersChangeEvent(added=added, removed=removed))
        )

    change([], [folder])
    await wait_for_hover(client, lambda text: text is None, "no attribution outside every workspace")
    change([folder], [])
    await wait_for_hover(client, lambda text: text is not None and "wrote this line" in text, "attribution again")


async def wait_for_hover(client, predicate, what):
    deadline = asyncio.get_running_loop().time() + 10
    while not predicate(await hover_text(client, 0)):
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


NOTES = os.path.join(ENV.ws, "notes.txt")
EXTRA = os.path.join(ENV.ws, "extra.txt")


async def test_rewind_asks_with_the_files_then_restores_them_and_continues_in_a_fork(client):
    Path(NOTES).write_text("by hand\n")
    ends = len(turn_ends(client))
    # The cancel test's slow reply stays queued when its turn was cancelled before the request
    # reached the mock: this turn's replies must be the next ones.
    with urllib.request.urlopen(urllib.request.Request(ENV.url + "/_fake/reset", data=b"", method="POST")) as answer:
        answer.read()
    ENV.script(
        [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.txt", "content": "by the agent\n"}}]},
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "extra.txt", "content": "new\n"}}]},
            {"content": "Wrote both."},
        ]
    )
    started = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="dsh.prompt", arguments=[{"text": "write the notes", "new": True}])
    )
    sid = started["sessionId"]
    await wait_for(lambda: any(f" of {sid} ended" in m for m in turn_ends(client)[ends:]), "the turn's end")
    assert turn_ends(client)[-1] == f"dsh: turn 1 of {sid} ended (completed)", turn_ends(client)
    assert Path(NOTES).read_text() == "by the agent\n" and Path(EXTRA).read_text() == "new\n"

    async def rewind(**arguments):
        return await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="dsh.rewind", arguments=[{"sessionId": sid, "step": 1, **arguments}])
        )

    # The dry run: what would change, nothing asked, nothing changed.
    plan = await rewind(dryRun=True)
    assert (plan["restored"], plan["created"], plan["deleted"], plan["conflicts"]) == (["notes.txt"], [], ["extra.txt"], []), plan
    assert plan["dryRun"] and not plan["cancelled"] and plan["sessionId"] == sid, plan
    assert not client.questions
    # Asked, and cancelled: nothing changes.
    client.answers.append("Cancel")
    cancelled = await rewind()
    assert cancelled["cancelled"] and cancelled["restored"] == ["notes.txt"], cancelled
    (question,) = client.questions
    assert [a.title for a in question.actions] == ["Rewind", "Cancel"], question.actions
    assert question.message == (
        f"dsh: rewind {sid} to before step 1? It restores notes.txt; deletes extra.txt. "
        "The conversation continues in a new session forked there."
    ), question.message
    assert Path(NOTES).read_text() == "by the agent\n" and Path(EXTRA).exists()

    # The user edits notes.txt by hand: without asking, the rewind is refused with dsh's code
    # and the file in its data; asked, it offers to overwrite it.
    Path(NOTES).write_text("edited by hand\n")
    with pytest.raises(Exception) as refused:
        await rewind(confirm=False)
    assert refused.value.code == 1015 and refused.value.data == {"conflicts": ["notes.txt"]}, refused.value
    assert Path(NOTES).read_text() == "edited by hand\n"
    messages = len(client.messages)
    client.answers.append("Overwrite and rewind")
    done = await rewind()
    question = client.questions[-1]
    assert [a.title for a in question.actions] == ["Overwrite and rewind", "Cancel"], question.actions
    assert "by someone else, and overwritten: notes.txt." in question.message, question.message
    assert Path(NOTES).read_text() == "by hand\n" and not Path(EXTRA).exists()
    fork = done["sessionId"]
    assert fork != sid and not done["cancelled"] and not done["dryRun"], done
    assert done["conflicts"] == ["notes.txt"], done
    rewound = (
        f"dsh: rewound {sid} to before step 1: restored notes.txt; deleted extra.txt; "
        f"the conversation continues in {fork}"
    )
    await wait_for(lambda: rewound in [m.message for m in client.messages[messages:]], "the rewind's message")

    # The fork takes the next prompt: its request has the conversation before step 1 (the
    # prompt, not what the agent did) and the new prompt.
    ends = len(turn_ends(client))
    ENV.script([{"content": "Starting over."}])
    await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="dsh.prompt", arguments=[{"text": "only the notes, then", "sessionId": fork}])
    )
    await wait_for(lambda: len(turn_ends(client)) > ends, "the fork's turn's end")
    assert turn_ends(client)[-1].endswith(f" of {fork} ended (completed)"), turn_ends(client)
    with urllib.request.urlopen(ENV.url + "/_fake/requests") as answer:
        body = json.load(answer)[-1]["body"]
    assert "write the notes" in body and "only the notes, then" in body, body
    assert "by the agent" not in body and "extra.txt" not in body, body
