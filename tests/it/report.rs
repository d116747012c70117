//! `empathic report`: the session page and the participant view, opened in headless
//! Chromium (Debian's `chromium`, installed by `scripts/setup.sh`) as staff open them:
//! a screenshot that is not blank, every section heading in the DOM, no URL in the file.
//! A failed session renders with its reason; an unknown session writes nothing.

use std::path::Path;

use crate::common::chromium::{browser, open_in_chromium};
use crate::common::*;
use empathic::report::page::{PARTICIPANT_SECTIONS, SESSION_SECTIONS};

/// Opens `page` in Chromium: every heading of `sections` in the DOM, a screenshot not blank.
fn assert_opens_with(page: &Path, sections: &[&str]) {
    let (dom, spread) = open_in_chromium(page);
    for h in sections {
        assert!(
            dom.contains(&format!(">{h}</h2>")),
            "section {h} missing from the DOM"
        );
    }
    assert!(
        spread > 10.0,
        "the screenshot looks blank (pixel spread {spread})"
    );
}

fn report(args: &[&str]) -> std::process::Output {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    empathic(&all)
}

fn assert_offline(html: &str) {
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "a URL in the page"
    );
    assert!(!html.contains("<script"), "a script in the page");
    assert!(
        !html.contains("<img") && !html.contains("data:image"),
        "an image in the page"
    );
}

#[test]
fn the_session_page_and_the_participant_view_open_in_a_browser_with_every_section() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("r.db");
    let bank = root().join("demo/stories/stories.jsonl");
    assert!(
        empathic(&["stories", "import", path_str(&bank), "--db", path_str(&db)])
            .status
            .success()
    );
    // Every modality on (the default), as `make demo` runs it.
    let o = replay_cli(&demo_session(), &db, None);
    assert!(o.status.success(), "{}", stderr(&o));
    let later = later_demo_session(&tmp.path().join("later"));
    assert!(replay_cli(&later, &db, None).status.success());

    let page = tmp.path().join("demo.html");
    let o = report(&["demo-0001", "--db", path_str(&db), "--out", path_str(&page)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), page.display().to_string());
    let html = std::fs::read_to_string(&page).unwrap();
    assert_offline(&html);
    // Plots are drawn (timeline, predictions, AU strip, pose, gaze, presence, voice).
    assert!(
        html.matches("<svg").count() >= 8,
        "{} plots",
        html.matches("<svg").count()
    );
    assert!(html.contains("text-zero-shot") && html.contains("The bus driver who waited"));
    // The answer at a glance, before the details: the quality verdict and, per story
    // shown, its title, the self-rating and what each predictor said (marked uncalibrated).
    let glance =
        &html[html.find("id=\"at-a-glance\"").unwrap()..html.find("id=\"session\"").unwrap()];
    assert!(
        glance.contains("Data quality: <b class=\"good\">good</b>"),
        "{glance}"
    );
    for (title, rating) in [
        ("The bus driver who waited", 4),
        ("My brother&#39;s first apartment", 3),
        ("Telling my father", 5),
    ] {
        let title = title.replace("&#39;", "'");
        assert!(
            glance.contains(&format!("<tr><td>{title}</td><td>{rating}</td><td>")),
            "{title} not in the summary: {glance}"
        );
    }
    assert!(glance.contains("predicted by text-zero-shot") && glance.contains("[uncalibrated]"));
    // Self-ratings drawn dashed in the prediction plot; shown and retrieved stories apart;
    // legends under plots, not over data.
    assert!(html.contains("Telling my father: rated 5"));
    assert!(html.contains("&#8211; &#8211;</span> Telling my father: rated 5"));
    assert!(
        html.contains("Stories shown")
            && html.contains("Stories retrieved while the participant shared")
    );
    assert!(html.contains("class=\"legend\""));
    // Action units by name, with the strip's colour scale; no word broken anywhere.
    assert!(html.contains("AU12 lip corner puller") && html.contains("class=\"scale\""));
    assert!(!html.contains("overflow-wrap:anywhere") && !html.contains("word-break:break-all}td"));
    // Producers and their sha256 at the end.
    let appendix = html
        .find("id=\"appendix:-what-produced-these-figures\"")
        .unwrap();
    assert!(html[appendix..].contains("all-MiniLM-L6-v2") && html[appendix..].contains("sha256:"));
    assert!(!html[..appendix].contains("sha256:"));
    // The transcript is off by default: the participant's words are not in the page.
    assert!(!html.contains("mister john dashwood"));
    assert_opens_with(&page, &SESSION_SECTIONS);

    // With the transcript allowed, the words are there.
    let cfg = tmp.path().join("t.toml");
    std::fs::write(&cfg, "[report]\ntranscript = true\n").unwrap();
    let with = tmp.path().join("with.html");
    let o = report(&[
        "demo-0001",
        "--db",
        path_str(&db),
        "--config",
        path_str(&cfg),
        "--out",
        path_str(&with),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&with)
        .unwrap()
        .contains("mister john dashwood"));

    // The participant across both sessions.
    let view = tmp.path().join("p.html");
    let o = report(&[
        "--participant",
        "P-DEMO",
        "--db",
        path_str(&db),
        "--out",
        path_str(&view),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&view).unwrap();
    assert_offline(&html);
    assert!(html.contains("demo-0001") && html.contains("demo-0002"));
    assert!(
        html.contains("ubc_state_social_connection"),
        "survey answers"
    );
    assert_opens_with(&view, &PARTICIPANT_SECTIONS);
}

#[test]
fn a_failed_session_renders_with_its_reason_and_unknown_ones_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_session(&demo_session(), &tmp.path().join("s"));
    // A malformed events line fails the session before any media (a truncated video keeps
    // what decoded since issue 55: `incomplete`, not failed).
    let text = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[6] = r#"{"t_ms": 100, "type": "rating", "story_id": "x""#;
    std::fs::write(dir.join("events.jsonl"), lines.join("\n")).unwrap();
    let db = tmp.path().join("f.db");
    let fast = config_without_vision_models(tmp.path());
    assert_eq!(replay_cli(&dir, &db, Some(&fast)).status.code(), Some(2));
    let page = tmp.path().join("failed.html");
    let o = report(&["demo-0001", "--db", path_str(&db), "--out", path_str(&page)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("This session is failed") && html.contains("line 7"));
    assert!(html.contains("No quality report was stored"));
    assert!(html.contains("No predictions were stored"));
    assert_opens_with(&page, &SESSION_SECTIONS);

    // Unknown session or participant: exit 2, named, and no file (nor a partial one).
    for args in [vec!["nope"], vec!["--participant", "nobody"]] {
        let out = tmp.path().join("x.html");
        let mut all = args.clone();
        all.extend(["--db", path_str(&db), "--out", path_str(&out)]);
        let o = report(&all);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(args.last().unwrap()), "{}", stderr(&o));
        assert!(!out.exists() && !tmp.path().join("x.html.partial").exists());
    }
    // An existing page is replaced only by a complete one.
    let o = report(&["nope", "--db", path_str(&db), "--out", path_str(&page)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(std::fs::read_to_string(&page).unwrap().contains("line 7"));
}

/// The study page from a central database holding two stations with a problem each (one's
/// camera missing, one offline after a session) and one in order, in SQLite and
/// PostgreSQL: both problems listed first, the healthy station last, every problem with
/// what to do; opened in Chromium; a missing database refused.
#[test]
fn the_study_page_lists_the_stations_problems_first_in_either_database() {
    use empathic::sync::central::{Central, Gate};
    use empathic::sync::health::{DeviceHealth, Health, HEALTH_FORMAT, HEALTH_VERSION};
    let tmp = tempfile::tempdir().unwrap();
    let pg = crate::common::postgres::Postgres::start();
    let now = empathic::clock::utc_now();
    let health = |station: &str, camera: bool| Health {
        format: HEALTH_FORMAT.into(),
        v: HEALTH_VERSION,
        study: "hs".into(),
        station: station.into(),
        sent_at: now.clone(),
        software: "0.1.0".into(),
        camera: DeviceHealth {
            present: camera,
            problem: (!camera).then(|| "cannot open /dev/video0".to_string()),
        },
        microphone: DeviceHealth {
            present: true,
            problem: None,
        },
        disk_free_mib: Some(50_000),
        disk_min_free_mib: 2048,
        sessions_today: 1,
        last_session_status: Some("complete".into()),
        last_session_ended_at: Some(now.clone()),
        ..Health::default()
    };
    for (k, (flag, target)) in [
        ("--db", tmp.path().join("central.db").display().to_string()),
        ("--central", pg.database("study")),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = Central::open(&target).unwrap();
        for (station, camera, status) in [
            ("st-camera", false, "online"),
            ("st-offline", true, "offline"),
            ("st-fine", true, "online"),
            ("st-old", true, "offline"),
        ] {
            c.enrol("hs", station, None, true).unwrap();
            let topic = format!("empathic/v1/hs/{station}/health");
            let bytes = serde_json::to_vec(&health(station, camera)).unwrap();
            c.store_health(&topic, &bytes, &Gate::plain()).unwrap();
            c.store_status(
                &format!("empathic/v1/hs/{station}/status"),
                status.as_bytes(),
                &Gate::plain(),
            )
            .unwrap();
        }
        // Decommissioned: its enrolment revoked, what it left retained is history.
        c.revoke("hs", "st-old", None).unwrap();
        drop(c);
        let page = tmp.path().join(format!("study-{k}.html"));
        let o = empathic(&[
            "study",
            "report",
            flag,
            &target,
            "--study",
            "hs",
            "--out",
            path_str(&page),
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let facts: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let problems = facts["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 2, "{facts:#}");
        let first_two: Vec<&str> = problems
            .iter()
            .map(|p| p["station"].as_str().unwrap())
            .collect();
        assert!(
            first_two.contains(&"st-camera") && first_two.contains(&"st-offline"),
            "{facts:#}"
        );
        assert!(problems
            .iter()
            .all(|p| p["severity"] == 3 && p["todo"].is_string()));
        let order: Vec<&str> = facts["stations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["station"].as_str().unwrap())
            .collect();
        assert_eq!(order[2..], ["st-fine", "st-old"], "{facts:#}");
        assert!(facts["stations"][3]["revoked_at"].is_string(), "{facts:#}");
        assert!(!facts["database"].as_str().unwrap().contains("password"));
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(
            !html.contains("<script") && !html.contains("http://") && !html.contains("https://")
        );
        let (dom, spread) = open_in_chromium(&page);
        assert!(spread > 5.0, "the page renders blank");
        let problems_at = dom.find("Open problems").unwrap();
        let stations_at = dom.find(">Stations<").unwrap();
        for what in ["camera missing (cannot open /dev/video0)", "offline since"] {
            let at = dom
                .find(what)
                .unwrap_or_else(|| panic!("{what} not on the page"));
            assert!(
                problems_at < at && at < stations_at,
                "{what} is not in the problem list"
            );
        }
        assert!(
            dom.contains(&format!("Made {now}")) || dom.contains("Made 20"),
            "{dom}"
        );
        if k == 0 {
            // Looked at by eye (the session note says what was checked).
            let _ = browser(
                &page,
                &[
                    "--window-size=1400,900",
                    &format!(
                        "--screenshot={}",
                        tmp.path().join("study-1400.png").display()
                    ),
                ],
            );
            if let Ok(keep) = std::env::var("EMPATHIC_KEEP_STUDY_PAGE") {
                let _ = std::fs::copy(tmp.path().join("study-1400.png"), keep);
            }
        }
    }
    // A study the database does not hold, while it holds others (issue 44: a default
    // study name printed an empty page, "0 open problems", exit 0): refused, naming them.
    let o = empathic(&[
        "study",
        "report",
        "--db",
        path_str(&tmp.path().join("central.db")),
        "--study",
        "not-started",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("it holds `hs`"), "{}", stderr(&o));
    // A study with nothing yet (a new central database: no station, no session): said
    // so, not a blank page.
    let fresh = tmp.path().join("fresh-central.db");
    drop(Central::open(path_str(&fresh)).unwrap());
    let empty = tmp.path().join("empty.html");
    let o = empathic(&[
        "study",
        "report",
        "--db",
        path_str(&fresh),
        "--study",
        "not-started",
        "--out",
        path_str(&empty),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (dom, spread) = open_in_chromium(&empty);
    assert!(spread > 5.0, "the empty study's page renders blank");
    for said in [
        "No station has enrolled",
        "No participant yet",
        "No session with a quality report yet",
    ] {
        assert!(dom.contains(said), "{said}: {dom}");
    }
    let o = empathic(&[
        "study",
        "report",
        "--db",
        path_str(&tmp.path().join("nothing.db")),
        "--out",
        path_str(&tmp.path().join("x.html")),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no central database at"),
        "{}",
        stderr(&o)
    );
    assert!(!tmp.path().join("nothing.db").exists());
}
