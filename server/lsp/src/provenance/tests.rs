//! Which documents are attributed, which are asked again, when lenses are refreshed, and the
//! hovers and lenses made of an attribution.
#![allow(clippy::unwrap_used)]

use serde_json::Value;

use super::*;

fn range(start_line: u64, end_line: u64, step: u64) -> ProvenanceRange {
    ProvenanceRange {
        start_line,
        end_line,
        session_id: "20261130-172312-cyzpba".to_owned(),
        title: None,
        turn: 1,
        prompt: None,
        step,
        step_seq: None,
        tool: "write_file".to_owned(),
        call_id: "call_00_abc".to_owned(),
        seq: 9,
        time_ms: 0,
        profile: None,
        model: None,
        usage: None,
        hit_percent: 0.0,
        cost: None,
    }
}

fn inner(folders: &[&str]) -> Inner {
    Inner { folders: folders.iter().map(PathBuf::from).collect(), ..Inner::default() }
}

fn uri(path: &str) -> Uri {
    format!("file://{path}").parse().unwrap()
}

fn doc(text: &str, ranges: Option<Vec<ProvenanceRange>>, shown: bool) -> Doc {
    let target = Some((PathBuf::from("/nowhere/ws/app.py"), PathBuf::from("/nowhere/ws")));
    Doc { target, text: text.to_owned(), ranges: ranges.map(Arc::new), shown, lensed: None }
}

#[test]
fn a_document_belongs_to_the_innermost_folder_that_holds_it() {
    let inner = inner(&["/nowhere/ws", "/nowhere/ws/sub"]);
    let target = |path: &str| inner.target_of(&uri(path), "text\n");
    let (path, workspace) = target("/nowhere/ws/sub/app.py").unwrap();
    assert_eq!(
        (path.to_str(), workspace.to_str()),
        (Some("/nowhere/ws/sub/app.py"), Some("/nowhere/ws/sub"))
    );
    assert_eq!(target("/nowhere/ws/app.py").unwrap().1, PathBuf::from("/nowhere/ws"));
    assert_eq!(target("/nowhere/other/app.py"), None);
    assert_eq!(target("/nowhere/wsx/app.py"), None, "a sibling with a longer name is outside");
}

#[test]
fn binary_and_huge_documents_are_never_attributed() {
    let inner = inner(&["/nowhere/ws"]);
    let file = uri("/nowhere/ws/app.py");
    assert_eq!(inner.target_of(&file, "a\0b"), None);
    assert_eq!(inner.target_of(&file, &"x".repeat(MAX_DOCUMENT_BYTES + 1)), None);
    assert!(inner.target_of(&file, &"x".repeat(MAX_DOCUMENT_BYTES)).is_some());
}

#[test]
fn only_shown_documents_without_an_attribution_are_asked_again() {
    let mut inner = inner(&["/nowhere/ws"]);
    inner.docs.insert("a".to_owned(), doc("a\n", None, true));
    inner.docs.insert("b".to_owned(), doc("b\n", Some(vec![]), true));
    inner.docs.insert("c".to_owned(), doc("c\n", None, false));
    let asked: Vec<String> = inner.unanswered().into_iter().map(|(uri, _, _)| uri).collect();
    assert_eq!(asked, ["a"]);
    inner.forget_attribution();
    let mut asked: Vec<String> = inner.unanswered().into_iter().map(|(uri, _, _)| uri).collect();
    asked.sort();
    assert_eq!(asked, ["a", "b"]);
}

#[test]
fn an_answer_about_an_older_text_is_not_kept() {
    let mut inner = inner(&["/nowhere/ws"]);
    inner.docs.insert("a".to_owned(), doc("new\n", None, true));
    let generation = inner.generation;
    inner.keep("a", "old\n", generation, &Arc::new(vec![range(0, 1, 1)]));
    assert!(inner.docs["a"].ranges.is_none());
    inner.keep("a", "new\n", generation, &Arc::new(vec![range(0, 1, 1)]));
    assert!(inner.docs["a"].ranges.is_some());
}

#[test]
fn lenses_drawn_from_another_attribution_are_refreshed_once() {
    let mut inner = inner(&["/nowhere/ws"]);
    let mut shown = doc("a\n", Some(vec![range(0, 1, 2)]), true);
    shown.lensed = Some(Arc::new(vec![range(0, 1, 1)]));
    inner.docs.insert("a".to_owned(), shown);
    // Drawn from the same attribution (another allocation of it), or never drawn: nothing.
    let mut same = doc("b\n", Some(vec![range(0, 1, 1)]), true);
    same.lensed = Some(Arc::new(vec![range(0, 1, 1)]));
    inner.docs.insert("b".to_owned(), same);
    inner.docs.insert("c".to_owned(), doc("c\n", Some(vec![range(0, 1, 3)]), true));
    assert!(inner.outdated_lenses());
    assert!(!inner.outdated_lenses(), "the editor re-asks after one refresh");
    // Not asked yet: nothing to compare with.
    inner.forget_attribution();
    assert!(!inner.outdated_lenses());
}

#[test]
fn a_hover_covers_the_lines_of_its_range_and_a_lens_sits_on_its_first() {
    let ranges = [range(0, 2, 1), range(3, 4, 2)];
    let covered: Vec<Option<u32>> = (0..5)
        .map(|line| hover(&ranges, line, false).and_then(|h| h.range).map(|r| r.start.line))
        .collect();
    assert_eq!(covered, [Some(0), Some(0), None, Some(3), None]);
    let lenses = lenses(&ranges);
    let marks: Vec<(u32, String, Option<Vec<Value>>)> = lenses
        .into_iter()
        .map(|lens| {
            let command = lens.command.unwrap();
            (lens.range.start.line, command.command, command.arguments)
        })
        .collect();
    let saw = |step: u64| Some(vec![json!({"sessionId": "20261130-172312-cyzpba", "step": step})]);
    assert_eq!(marks, [(0, "dsh.saw".to_owned(), saw(1)), (3, "dsh.saw".to_owned(), saw(2))]);
}

#[test]
fn an_answer_asked_before_a_log_changed_is_not_kept() {
    let mut inner = inner(&["/nowhere/ws"]);
    inner.docs.insert("a".to_owned(), doc("fn a() {}\n", None, true));
    let answer = Arc::new(vec![range(0, 1, 1)]);
    // Asked, then a log of the workspace changed while the daemon answered: dropped, and the
    // document is one to ask again.
    let asked = inner.generation;
    inner.forget_attribution();
    inner.keep("a", "fn a() {}\n", asked, &answer);
    assert!(inner.docs["a"].ranges.is_none());
    assert_eq!(inner.unanswered().len(), 1, "it is asked again");
    // Asked after the change: kept.
    let asked = inner.generation;
    inner.keep("a", "fn a() {}\n", asked, &answer);
    assert!(inner.docs["a"].ranges.is_some());
}
