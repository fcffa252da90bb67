//! The line transport's answering step over an in-memory pipe, with methods of its own.

#![allow(clippy::expect_used)]

use std::time::Duration;

use dsh_protocol::jsonrpc::Request;
use dsh_protocol::method::SESSION_REQUEST;
use jsonrpsee::RpcModule;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt as _, BufReader};

use super::*;

/// `session/request` answers `size` bytes of text; `daemon/status` 8 KiB of it.
fn methods(size: usize) -> Methods {
    let mut module = RpcModule::new(());
    module
        .register_method(SESSION_REQUEST, move |_, _, _| "x".repeat(size))
        .expect("a new method name");
    module.register_method("daemon/status", |_, _, _| "y".repeat(STATUS)).expect("a new name");
    module.into()
}

const STATUS: usize = 8 * 1024;

/// A large answer being written to a client that reads slowly, then a small answer and a second
/// large one on the same connection: all three arrive, whether the large answers are larger
/// than the whole outbound budget or just under it. The first large answer, waiting to be
/// written, used to make the next line look like a client that fell behind, and the connection
/// was dropped with every answer on it.
#[tokio::test(flavor = "multi_thread")]
async fn large_answers_and_others_reach_a_client_that_reads_slowly() {
    for size in [OUTBOUND_BUDGET_BYTES + 1024 * 1024, OUTBOUND_BUDGET_BYTES - 1024] {
        three_answers_read_slowly(size).await;
    }
}

async fn three_answers_read_slowly(size: usize) {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let (server_read, server_write) = tokio::io::split(server);
    let shutdown = CancellationToken::new();
    let serving = tokio::spawn(serve_lines(
        methods(size),
        LargePlaces::default(),
        server_read,
        server_write,
        shutdown.clone(),
    ));
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let ask = |id: u64, method: &str| {
        let line = Request::new(Id::Number(id), method, raw(&json!({}))).to_line();
        format!("{line}\n")
    };
    client_write.write_all(ask(1, SESSION_REQUEST).as_bytes()).await.expect("the pipe is open");
    // The start of the first answer: it is being written, and waits on this client.
    let mut start = [0u8; 100];
    client_read.read_exact(&mut start).await.expect("an answer");
    for (id, method) in [(2, "daemon/status"), (3, SESSION_REQUEST)] {
        client_write.write_all(ask(id, method).as_bytes()).await.expect("the pipe is open");
    }
    let mut lines = BufReader::new((&start[..]).chain(client_read)).lines();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let next = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await;
        let line = next.expect("an answer in time").expect("a readable pipe").expect("a line");
        let tail = &line[line.len().saturating_sub(300)..];
        let response: Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("{size}: not one answer, it ends with: {tail}"));
        assert!(response.get("error").is_none(), "{size}: {tail}");
        let id = response["id"].as_u64().expect("an id");
        let expected = if id == 2 { STATUS } else { size };
        assert_eq!(response["result"].as_str().map(str::len), Some(expected), "answer {id}");
        ids.push(id);
    }
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3], "{size}");
    drop(client_write);
    shutdown.cancel();
    serving.await.expect("the connection task ends");
}
