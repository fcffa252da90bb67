//! The texts people see, pinned.

use expect_test::expect;

use super::*;

fn range() -> ProvenanceRange {
    ProvenanceRange {
        start_line: 3,
        end_line: 5,
        session_id: "20261130-172312-cyzpba".to_owned(),
        title: Some("write the app".to_owned()),
        turn: 2,
        prompt: Some("make it faster".to_owned()),
        step: 7,
        step_seq: Some(40),
        tool: "edit_file".to_owned(),
        call_id: "call_00_abc".to_owned(),
        seq: 44,
        time_ms: 1_796_059_392_466,
        profile: Some("deepseek".to_owned()),
        model: Some("deepseek-v4-flash".to_owned()),
        usage: Some(Usage {
            prompt_tokens: 10_000,
            cache_hit_tokens: 9_700,
            cache_miss_tokens: 300,
            completion_tokens: 120,
            reasoning_tokens: 20,
            cache_write_tokens: 0,
        }),
        hit_percent: 97.0,
        cost: Some(Cost { amount: 0.000105, saved: 0.00131, currency: "USD".to_owned() }),
    }
}

#[test]
fn a_hover_names_session_turn_step_model_usage_cost_and_the_call() {
    expect![[r#"
        **dsh** · step 7 wrote this line

        - session: write the app (`20261130-172312-cyzpba`)
        - turn 2: make it faster
        - model: deepseek/deepseek-v4-flash
        - usage: 10000 prompt tokens (97% cached), 120 output tokens
        - cost: 0.000105 USD (the cache saved 0.001310)
        - call: `edit_file` (`call_00_abc`, log seq 44)

        What the model saw: command `dsh.saw` (the code lens above), or `dsh saw 20261130-172312-cyzpba --step 7`"#]]
    .assert_eq(&hover(&range(), false));
}

#[test]
fn a_hover_for_an_editor_that_follows_command_links_has_one() {
    let text = hover(&range(), true);
    let link = "[Open what the model saw at step 7](command:dsh.saw?%5B%7B%22sessionId%22%3A%2220261130-172312-cyzpba%22%2C%22step%22%3A7%7D%5D)";
    assert!(text.contains(link), "{text}");
}

/// A title or prompt is shown as written: a link in it is text, not a command a click runs.
#[test]
fn markdown_in_a_title_or_prompt_is_shown_as_text() {
    let mut range = range();
    range.title = Some("*bold* title".to_owned());
    range.prompt = Some("[click](command:dsh.prompt?%5B%22rm%22%5D)".to_owned());
    let text = hover(&range, true);
    assert!(text.contains("- session: \\*bold\\* title"), "{text}");
    assert!(
        text.contains("- turn 2: \\[click\\]\\(command:dsh\\.prompt?%5B%22rm%22%5D\\)"),
        "{text}"
    );
    assert!(!text.contains("[click](command:"), "{text}");
}

#[test]
fn a_lens_says_step_and_cache_hit_and_only_the_step_when_it_never_finished() {
    assert_eq!(lens(&range()), "dsh · step 7 · 97% cached");
    let unfinished = ProvenanceRange { usage: None, ..range() };
    assert_eq!(lens(&unfinished), "dsh · step 7");
}

#[test]
fn turn_ends_say_why() {
    assert_eq!(turn_ended("s", 3, "completed", None), "dsh: turn 3 of s ended (completed)");
    assert_eq!(
        turn_ended("s", 3, "error", Some("provider: 500")),
        "dsh: turn 3 of s ended (error): provider: 500"
    );
}

/// A session pinned to an ad-hoc profile (a client's `--base-url`) names the profile and model,
/// then where the requests went.
#[test]
fn a_hover_names_the_url_of_an_ad_hoc_profile_after_the_model() {
    let ad_hoc =
        ProvenanceRange { profile: Some("deepseek@http://127.0.0.1:8000".to_owned()), ..range() };
    let text = hover(&ad_hoc, false);
    assert!(
        text.contains("- model: deepseek/deepseek-v4-flash at http://127.0.0.1:8000\n"),
        "{text}"
    );
}

/// A rewind of `s1` whose continuing session is `session_id`.
fn plan(session_id: &str) -> SessionRewindResult {
    serde_json::from_value(serde_json::json!({
        "sessionId": session_id,
        "restored": ["a.txt", "src/b.rs"],
        "created": ["gone.txt"],
        "deleted": ["new.txt"],
        "conflicts": ["a.txt"],
        "notRestorable": ["big.bin"],
        "checkpoint": "5b0e",
        "dryRun": true,
    }))
    .unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn a_rewind_asks_naming_every_file_it_changes_and_those_someone_else_changed() {
    let question = rewind_question("s1", &rewind_target(Some(3), None), &plan("s1"), true);
    expect![[r#"dsh: rewind s1 to before step 3? It restores a.txt, src/b.rs; recreates gone.txt; deletes new.txt; cannot restore (over the size cap) big.bin. Changed since the agent's last checkpoint by someone else, and overwritten: a.txt. The conversation continues in a new session forked there."#]]
        .assert_eq(&question);
    let files_only = rewind_question("s1", &rewind_target(None, Some(41)), &plan("s1"), false);
    assert!(files_only.starts_with("dsh: rewind s1 to the checkpoint at seq 41? It restores"));
    assert!(!files_only.contains("continues"), "{files_only}");
}

#[test]
fn a_rewind_says_what_it_did_and_which_session_continues() {
    let target = rewind_target(Some(3), None);
    expect![[r#"dsh: rewound s1 to before step 3: restored a.txt, src/b.rs; recreated gone.txt; deleted new.txt; could not restore (over the size cap) big.bin; the conversation continues in s2"#]]
        .assert_eq(&rewound("s1", &target, &plan("s2")));
    assert!(rewound("s1", &target, &plan("s1")).ends_with("; s1 continues"));
    let many = (0..13).map(|n| format!("f{n}")).collect::<Vec<_>>();
    expect![[r#"dsh: the rewind would overwrite files changed since the agent's last checkpoint by someone else: f0, f1, f2, f3, f4, f5, f6, f7, f8, f9 and 3 more. Overwrite them?"#]]
        .assert_eq(&rewind_conflicts(&many));
}
