//! The story bank: import, search, retrieval for a session with earlier exposures left out.

use std::path::Path;

use crate::common::*;

fn bank() -> std::path::PathBuf {
    root().join("demo/stories/stories.jsonl")
}

fn ids(json: &[u8]) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(json).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap().to_string())
        .collect()
}

fn import(db: &Path) {
    let o = empathic(&["stories", "import", path_str(&bank()), "--db", path_str(db)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("imported 42 stories"), "{}", stdout(&o));
}

#[test]
fn search_finds_the_closest_demo_stories() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    import(&db);
    let q = "I finally told my father I was proud of him";
    let o = empathic(&["stories", "search", q, "-k", "3", "--db", path_str(&db)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.lines().next().unwrap().contains("demo-story-27"),
        "{text}"
    );
    let o = empathic(&[
        "stories",
        "search",
        q,
        "-k",
        "5",
        "--db",
        path_str(&db),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let scores: Vec<f64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["score"].as_f64().unwrap())
        .collect();
    assert_eq!(scores.len(), 5);
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    // Importing again replaces rather than duplicates.
    import(&db);
    let conn = crate::common::store::open_db(&db);
    let n: i64 = conn
        .query_row("SELECT count(*) FROM story_embeddings", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 42);
}

#[test]
fn retrieve_leaves_out_stories_seen_in_earlier_sessions() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    import(&db);
    // Session 1 (1 Nov) showed demo stories 03, 11 and 27.
    let fast = config_without_vision_models(tmp.path());
    let o = replay_cli(&demo_session(), &db, Some(&fast));
    assert!(o.status.success(), "{}", stderr(&o));
    // Session 2, a week later: the participant shares a story about their father.
    let second = copy_session(&demo_session(), &tmp.path().join("s2"));
    let manifest = std::fs::read_to_string(second.join("session.json"))
        .unwrap()
        .replace("demo-0001", "demo-0002")
        .replace("2026-11-01", "2026-11-08");
    std::fs::write(second.join("session.json"), manifest).unwrap();
    std::fs::write(
        second.join("events.jsonl"),
        concat!(
            "{\"t_ms\": 0, \"type\": \"phase\", \"phase\": \"story_share\"}\n",
            "{\"t_ms\": 9000, \"type\": \"utterance\", \"speaker\": \"participant\", \"start_ms\": 1000, \"end_ms\": 9000, \"text\": \"Last winter my father was in hospital and I told him how proud I am of him.\"}\n",
        ),
    )
    .unwrap();
    let o = replay_cli(&second, &db, Some(&fast));
    assert!(o.status.success(), "{}", stderr(&o));

    let all = |session: &str| {
        let o = empathic(&[
            "stories",
            "retrieve",
            session,
            "-k",
            "42",
            "--db",
            path_str(&db),
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        ids(&o.stdout)
    };
    let later = all("demo-0002");
    assert_eq!(later.len(), 39);
    for seen in ["demo-story-03", "demo-story-11", "demo-story-27"] {
        assert!(
            !later.contains(&seen.to_string()),
            "{seen} was shown in demo-0001"
        );
    }
    // The first session has no earlier one: nothing is left out.
    assert_eq!(all("demo-0001").len(), 42);
    let o = empathic(&[
        "stories",
        "retrieve",
        "demo-0002",
        "-k",
        "3",
        "--db",
        path_str(&db),
    ]);
    let text = stdout(&o);
    assert!(text.contains("leaving out 3 stories"), "{text}");
    assert!(text.contains("demo-story-"), "{text}");
}

#[test]
fn bad_banks_and_empty_stores_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    let bad = tmp.path().join("bad.jsonl");
    let line = std::fs::read_to_string(bank())
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    std::fs::write(&bad, format!("{line}\n{line}\n")).unwrap();
    let o = empathic(&["stories", "import", path_str(&bad), "--db", path_str(&db)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("row 2") && stderr(&o).contains("bad.jsonl"),
        "{}",
        stderr(&o)
    );

    // A store without stories.
    let fast = config_without_vision_models(tmp.path());
    let o = replay_cli(&demo_session(), &db, Some(&fast));
    assert!(o.status.success());
    let o = empathic(&["stories", "search", "x", "--db", path_str(&db)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("stories import"), "{}", stderr(&o));
    let o = empathic(&["stories", "retrieve", "nope", "--db", path_str(&db)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nope"));
}

/// `stories recommend`: never a story the participant saw, with reasons, the same answer
/// twice; the policies differ where the participant's own calibration turns the order; a
/// participant without a session and an empty text are refused with the reason.
#[test]
fn recommend_leaves_out_what_was_shown_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    import(&db);
    let config = config_without_vision_models(tmp.path());
    let o = replay_cli(&demo_session(), &db, Some(&config));
    assert!(o.status.success(), "{}", stderr(&o));
    let ask = |policy: &str| -> serde_json::Value {
        let o = empathic(&[
            "stories",
            "recommend",
            "--participant",
            "P-DEMO",
            "--policy",
            policy,
            "-k",
            "3",
            "--db",
            path_str(&db),
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let sim = ask("similarity");
    assert_eq!(sim, ask("similarity"), "deterministic");
    assert_eq!(sim["from_session"], "demo-0001");
    assert_eq!(sim["left_out"], 3);
    let stories = sim["stories"].as_array().unwrap();
    assert_eq!(stories.len(), 3);
    for s in stories {
        let id = s["story_id"].as_str().unwrap();
        assert!(
            !["demo-story-03", "demo-story-11", "demo-story-27"].contains(&id),
            "{sim}"
        );
        assert!(s["similarity"].is_f64() && s["predicted"].is_f64(), "{s}");
    }
    let cos: Vec<f64> = stories
        .iter()
        .map(|s| s["similarity"].as_f64().unwrap())
        .collect();
    assert!(cos.windows(2).all(|w| w[0] >= w[1]), "{cos:?}");
    // The demo participant rated three stories: their calibration is used.
    assert!(stories[0]["calibration"]
        .as_str()
        .unwrap()
        .starts_with("participant:"));
    let pe = ask("predicted_empathy");
    let pred: Vec<f64> = pe["stories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["predicted"].as_f64().unwrap())
        .collect();
    assert!(pred.windows(2).all(|w| w[0] >= w[1]), "{pe}");
    let ranks: Vec<u64> = ask("explore")["stories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["predicted_rank"].as_u64().unwrap())
        .collect();
    assert_eq!(ranks, [1, 20, 39]);
    let o = empathic(&[
        "stories",
        "recommend",
        "--participant",
        "P-NONE",
        "--db",
        path_str(&db),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("has no session"), "{}", stderr(&o));
    let o = empathic(&[
        "stories",
        "recommend",
        "--participant",
        "P-DEMO",
        "--text",
        " ",
        "--db",
        path_str(&db),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = empathic(&[
        "stories",
        "recommend",
        "--participant",
        "P-DEMO",
        "-k",
        "0",
        "--db",
        path_str(&db),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("1-50"), "{}", stderr(&o));
    // --emit into a folder that is not there is refused before anything is replayed.
    let o = empathic(&[
        "replay",
        path_str(&demo_session()),
        "--db",
        path_str(&tmp.path().join("e.db")),
        "--emit",
        path_str(&tmp.path().join("missing/s.jsonl")),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!tmp.path().join("e.db").exists());
}
