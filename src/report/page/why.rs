//! The session page's "why" panel: per predictor and story, what moved the prediction
//! (`report::why`), as a sentence, a bar chart of the cues, the modalities' course over the
//! session and a table of each window's largest cue, with what an attribution is and is not.
//! The participant's words appear only when the page includes the transcript.

use std::fmt::Write as _;

use super::section::Section;
use super::{esc, note, plot, plots, PageError, Series, PALETTE};
use crate::report::why::{gather, Why, WHAT_IT_IS};

/// At most this many cues in a bar chart (the rest are in `explain`).
const BARS: usize = 10;

/// A modality's name as staff read it.
fn modality_words(m: &str) -> &str {
    match m {
        "text" => "the words",
        "face" => "the face",
        "blendshapes" => "the expression (blendshapes)",
        "appearance" => "the appearance",
        "body" => "the posture",
        m if m.starts_with("acoustic") => "the voice",
        m => m,
    }
}

/// One or two sentences: which modality raised it most and which lowered it most.
fn sentence(w: &Why) -> String {
    let mut parts = Vec::new();
    let top_cue = |modality: &str| {
        w.cues
            .iter()
            .filter(|c| c.modality == modality && c.cue != crate::fusion::attribute::WORDS)
            .max_by(|a, b| a.value.abs().total_cmp(&b.value.abs()))
            .filter(|c| c.cue != "all of it")
            .map_or(String::new(), |c| format!(", mostly {}", c.cue))
    };
    let raised = w
        .modalities
        .iter()
        .filter(|m| m.value > 0.005)
        .max_by(|a, b| a.value.total_cmp(&b.value));
    let lowered = w
        .modalities
        .iter()
        .filter(|m| m.value < -0.005)
        .min_by(|a, b| a.value.total_cmp(&b.value));
    if let Some(m) = raised {
        parts.push(format!(
            "{} raised it most ({:+.2}{})",
            modality_words(&m.modality),
            m.value,
            top_cue(&m.modality)
        ));
    }
    if let Some(m) = lowered {
        parts.push(format!(
            "{} lowered it most ({:+.2}{})",
            modality_words(&m.modality),
            m.value,
            top_cue(&m.modality)
        ));
    }
    let mut s = if parts.is_empty() {
        "No cue moved it by more than 0.005 from its baseline".to_string()
    } else {
        parts.join("; ")
    };
    if let Some(first) = s.get(..1) {
        s = first.to_uppercase() + &s[1..];
    }
    s + "."
}

/// Writes the panel for every attributed prediction of the session.
pub(super) fn why_panel(out: &mut String, cx: &Section<'_>) -> Result<(), PageError> {
    let rows = cx.store.session_attributions(cx.id)?;
    let _ = writeln!(out, "<h3 id=\"why\">Why these predictions</h3>");
    if rows.is_empty() {
        note(
            out,
            "No attributions were stored with these predictions (`[fusion] explain = false`, a build before attributions, or a central database whose station syncs no window features).",
        );
        return Ok(());
    }
    note(out, WHAT_IT_IS);
    let title = |story: &str| {
        cx.d.stories
            .iter()
            .find(|st| st.story_id == story)
            .map(|st| st.title.clone())
            .or_else(|| {
                cx.d.predictions
                    .iter()
                    .find(|p| p.story_id == story)
                    .and_then(|p| p.title.clone())
            })
            .unwrap_or_else(|| story.to_string())
    };
    for w in gather(&rows, cx.utterances) {
        let _ = writeln!(
            out,
            "<details class=\"why\"{}><summary><b>{}</b> toward &ldquo;{}&rdquo; ({}, {} window{}): predicted {:.2} = baseline {:.2} {:+.2}{}</summary>",
            if w.retrieved { "" } else { " open" },
            esc(&w.predictor),
            esc(&title(&w.story_id)),
            if w.retrieved { "retrieved while sharing" } else { "after it was shown" },
            w.windows,
            if w.windows == 1 { "" } else { "s" },
            w.score,
            w.baseline,
            w.score - w.baseline,
            if w.synthetic {
                " <span class=\"synthetic\">[synthetic: not an empathy model]</span>"
            } else {
                ""
            }
        );
        let _ = writeln!(out, "<p>{}</p>", esc(&sentence(&w)));
        let absent: Vec<String> = w
            .modalities
            .iter()
            .filter(|m| m.absent_windows > 0)
            .map(|m| {
                format!(
                    "{} in {} of {} windows",
                    m.modality, m.absent_windows, w.windows
                )
            })
            .collect();
        if !absent.is_empty() {
            note(
                out,
                &format!(
                    "Absent (it could not move the prediction there): {}.",
                    absent.join(", ")
                ),
            );
        }
        let mut bars: Vec<(String, f64)> = w
            .cues
            .iter()
            .filter(|c| c.cue != crate::fusion::attribute::WORDS)
            .map(|c| (format!("{}: {}", c.modality, c.cue), c.value))
            .collect();
        if let Some(words) = w.words() {
            bars.push(("text: the words".to_string(), words));
        }
        bars.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
        bars.truncate(BARS);
        plot(out, Ok(plots::bar_chart("change of the 1-5 score", &bars)))?;
        if w.method.contains("sampled") {
            note(
                out,
                "Cues within a modality were sampled (the modalities are exact); `empathic explain --json` gives each cue's standard error.",
            );
        }
        if !w.utterances.is_empty() {
            out.push_str("<table><tr><th>utterance</th><th>moved it by</th></tr>\n");
            for u in w.utterances.iter().take(6) {
                let words = match (&u.text, cx.opts.transcript) {
                    (Some(t), true) => format!("&ldquo;{}&rdquo;", esc(t)),
                    _ => "(words shown with --transcript)".to_string(),
                };
                let _ = writeln!(
                    out,
                    "<tr><td>{}&ndash;{} {words}</td><td>{:+.3}</td></tr>",
                    plots::mmss(u.start_secs),
                    plots::mmss(u.end_secs),
                    u.value
                );
            }
            out.push_str("</table>\n");
        }
        course(out, cx, &w)?;
        out.push_str("</details>\n");
    }
    Ok(())
}

/// The modalities' values window by window, and each window's largest cue.
fn course(out: &mut String, cx: &Section<'_>, w: &Why) -> Result<(), PageError> {
    if w.course.len() > 1 {
        let mut names: Vec<&String> = w.course.iter().flat_map(|p| p.modalities.keys()).collect();
        names.sort();
        names.dedup();
        let lines: Vec<Series> = names
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut s = Series::new(
                    modality_words(m),
                    w.course
                        .iter()
                        .map(|p| (p.end_secs, p.modalities.get(*m).copied().unwrap_or(0.0)))
                        .collect(),
                    PALETTE[i % PALETTE.len()],
                );
                s.dots = w.course.len() < 3;
                s
            })
            .collect();
        let m = w
            .course
            .iter()
            .flat_map(|p| p.modalities.values())
            .map(|v| v.abs())
            .fold(0.1, f64::max);
        plot(
            out,
            plots::line_chart(
                "moved the score by (window end)",
                (-m, m),
                cx.duration,
                &lines,
                &cx.behind(),
            ),
        )?;
        out.push_str(&plots::legend_html(&lines));
    }
    out.push_str("<details><summary>Each window's largest cue</summary><table class=\"why-windows\"><tr><th>window</th><th>ends</th><th>predicted</th><th>baseline</th><th>largest cue</th><th>moved it by</th></tr>\n");
    for p in &w.course {
        let top = p.top.first();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td><td>{}</td></tr>",
            p.window_index,
            plots::mmss(p.end_secs),
            p.score,
            p.baseline,
            top.map_or("-".into(), |c| esc(&format!("{}: {}", c.modality, c.cue))),
            top.map_or("-".into(), |c| format!("{:+.4}", c.value)),
        );
    }
    out.push_str("</table></details>\n");
    Ok(())
}
