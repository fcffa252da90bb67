//! The LSP front (`dsh lsp`) from Rust: a bare LSP client on its stdio (`front.rs`) and a
//! proxy between it and the daemon's socket that records every request the front sends, so a
//! test can say what the front asks the daemon and when. The editors' own clients (pytest-lsp,
//! Neovim, Emacs) drive it in `tests/lsp/*.sh`; these tests pin what no editor sees: an idle
//! front asks the daemon nothing, and still hears of turns other clients start.

mod front;
mod listens;
