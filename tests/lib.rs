//! Shared helpers for the workspace-level tests (tidy checks, end-to-end scenarios).
