//! The method table against the protocol's list of methods.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use dsh_protocol::method;

use crate::daemon::Daemon;
use crate::startup::{DaemonConfig, DshHome};

#[test]
fn the_table_answers_exactly_the_protocols_methods() {
    let temp = tempfile::tempdir().unwrap();
    let config = DaemonConfig::builtin(DshHome::new(temp.path()), "http://127.0.0.1:9".to_owned());
    let module = super::module(Daemon::new(config).unwrap()).unwrap();
    let registered: BTreeSet<&str> = module.method_names().collect();
    let documented: BTreeSet<&str> = method::ALL.iter().copied().collect();
    assert_eq!(registered, documented);
}
