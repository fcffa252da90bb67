"""A stand-in for the user's own language server (pyright, rust-analyzer…), for the test that
dsh runs beside it on one buffer: a pygls server that answers every hover with one line.

    python3 other_server.py
"""

from lsprotocol import types
from pygls.lsp.server import LanguageServer

server = LanguageServer("other-server", "1.0")


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(params: types.HoverParams):
    return types.Hover(
        contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="the user's own server"),
    )


if __name__ == "__main__":
    server.start_io()
