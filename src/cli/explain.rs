//! `empathic explain SESSION [--story ID] [--predictor P] [--json]`: per story, the
//! session-level prediction, its baseline and the cues that moved it, largest first, with
//! the utterances that raised and lowered it most (`report::why`).

use std::fmt::Write as _;
use std::process::ExitCode;

use super::options::{ConfigOption, DbOption, JsonOption};
use super::{db_path, fail, load_config, open_existing_store, print_json, Failure};
use crate::exit::ExitKind;
use crate::report::why::{gather, Why, WHAT_IT_IS};

/// Why each prediction of a session is what it is: the cues that moved it from its baseline.
#[derive(clap::Args)]
pub struct Args {
    /// The session's id (`empathic sessions list`).
    session: String,
    /// Only this story.
    #[arg(long)]
    story: Option<String>,
    /// Only this predictor.
    #[arg(long)]
    predictor: Option<String>,
    #[command(flatten)]
    db: DbOption,
    #[command(flatten)]
    config: ConfigOption,
    #[command(flatten)]
    json: JsonOption,
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        let config = load_config(self.config.path())?;
        let path = db_path(self.db.db, &config);
        let store = open_existing_store(&path)?;
        if store.session_status(&self.session).map_err(fail)?.is_none() {
            return Err((
                ExitKind::BadInput,
                format!("no session `{}` in {}", self.session, path.display()),
            ));
        }
        let rows = store.session_attributions(&self.session).map_err(fail)?;
        let utterances = store.utterances(&self.session).map_err(fail)?;
        let titles: std::collections::BTreeMap<String, String> = store
            .export_reads()
            .stories()
            .map_err(fail)?
            .into_iter()
            .map(|(id, title, _)| (id, title))
            .collect();
        let mut whys = gather(&rows, &utterances);
        whys.retain(|w| {
            self.story.as_deref().is_none_or(|s| w.story_id == s)
                && self.predictor.as_deref().is_none_or(|p| w.predictor == p)
        });
        if whys.is_empty() {
            let predicted = store.session_predictions(&self.session).map_err(fail)?;
            let why_not = if predicted.is_empty() {
                "the session has no predictions (no window of the configured phases had a story in play)".to_string()
            } else if rows.is_empty() {
                "its predictions carry no attributions: they were made with `[fusion] explain = false`, by a build before attributions, or a central database whose station syncs no window features (`[sync] window_features`); replay the session with --replace to add them".to_string()
            } else {
                "no prediction matches --story/--predictor".to_string()
            };
            return Err((
                ExitKind::BadInput,
                format!(
                    "nothing to explain in session `{}`: {why_not}",
                    self.session
                ),
            ));
        }
        if self.json.json {
            print_json(&whys)?;
        } else {
            out!("{}", render(&whys, &titles));
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The text form: per predictor and story, the prediction as baseline + cues.
pub fn render(whys: &[Why], titles: &std::collections::BTreeMap<String, String>) -> String {
    let mut s = String::new();
    for w in whys {
        let label = crate::fusion::calibration_label(&w.predictor, &w.calibration, w.synthetic);
        let _ = writeln!(
            s,
            "{} [{label}] toward {} \"{}\" ({}, {} window{}; attribution {})",
            w.predictor,
            w.story_id,
            titles.get(&w.story_id).map_or("?", String::as_str),
            if w.retrieved {
                "retrieved while the participant shared"
            } else {
                "after it was shown"
            },
            w.windows,
            if w.windows == 1 { "" } else { "s" },
            w.method
        );
        let _ = writeln!(
            s,
            "  predicted {:.2} = baseline {:.2} {:+.2}",
            w.score,
            w.baseline,
            w.score - w.baseline
        );
        for m in &w.modalities {
            let absent = match m.absent_windows {
                0 => String::new(),
                n if n == w.windows => "  (absent in every window)".to_string(),
                n => format!("  (absent in {n} of {} windows)", w.windows),
            };
            let _ = writeln!(s, "  {:<18} {:+.3}{absent}", m.modality, m.value);
        }
        let _ = writeln!(s, "  cues, largest first:");
        for c in w
            .cues
            .iter()
            .filter(|c| c.cue != crate::fusion::attribute::WORDS)
        {
            let se = c.se.map_or(String::new(), |e| format!("  (± {e:.3})"));
            let _ = writeln!(
                s,
                "    {:<40} {:+.3}{se}",
                format!("{}: {}", c.modality, c.cue),
                c.value
            );
        }
        let words = w.words().unwrap_or(0.0);
        if !w.utterances.is_empty() {
            let _ = writeln!(
                s,
                "    {:<40} {:+.3}",
                "text: the words, all together", words
            );
            let mut raised: Vec<_> = w.utterances.iter().filter(|u| u.value > 0.0).collect();
            let mut lowered: Vec<_> = w.utterances.iter().filter(|u| u.value < 0.0).collect();
            raised.truncate(3);
            lowered.truncate(3);
            for (title, list) in [("raised it most", raised), ("lowered it most", lowered)] {
                if list.is_empty() {
                    continue;
                }
                let _ = writeln!(s, "  utterances that {title}:");
                for u in list {
                    let _ = writeln!(
                        s,
                        "    {:+.3}  {:>6.1}-{:<6.1} s  {}",
                        u.value,
                        u.start_secs,
                        u.end_secs,
                        u.text
                            .as_deref()
                            .map_or("(no transcript stored)".to_string(), |t| format!("\"{t}\""))
                    );
                }
            }
        }
        s.push('\n');
    }
    let _ = writeln!(s, "{WHAT_IT_IS}");
    if whys.iter().any(|w| w.synthetic) {
        let _ = writeln!(
            s,
            "A synthetic model was trained on planted ratings: its attributions show what it learned from them, nothing about people."
        );
    }
    s
}
