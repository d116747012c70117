//! The session page's summary at a glance and its appendix helpers (AU names, producers,
//! predictors).

use super::*;

/// An action unit's code with its FACS name (Ekman and Friesen's), e.g. `AU12 lip corner
/// puller`; an unknown code as it is.
pub(super) fn au_label(code: &str) -> String {
    let name = match code.trim_start_matches("AU").trim_start_matches('0') {
        "1" => "inner brow raiser",
        "2" => "outer brow raiser",
        "4" => "brow lowerer",
        "5" => "upper lid raiser",
        "6" => "cheek raiser",
        "7" => "lid tightener",
        "9" => "nose wrinkler",
        "10" => "upper lip raiser",
        "12" => "lip corner puller",
        "14" => "dimpler",
        "15" => "lip corner depressor",
        "17" => "chin raiser",
        "20" => "lip stretcher",
        "23" => "lip tightener",
        "25" => "lips part",
        "26" => "jaw drop",
        "28" => "lip suck",
        "45" => "blink",
        _ => return code.to_string(),
    };
    format!("{code} {name}")
}

/// A producer string with its sha256 set apart (a hash may break anywhere, words not).
pub(super) fn producer_html(producer: Option<&str>) -> String {
    let Some(p) = producer else {
        return "(not recorded)".into();
    };
    p.split(' ')
        .map(|w| {
            let hex = w.rsplit([':', '=']).next().unwrap_or(w);
            if hex.len() >= 32 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
                format!("<span class=\"hash\">{}</span>", esc(w))
            } else {
                esc(w)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The predictors behind the session's predictions: synthetic or not, how calibrated.
pub(super) fn predictors_appendix(out: &mut String, d: &SessionDetail) {
    let mut seen: BTreeMap<&str, (bool, &str)> = BTreeMap::new();
    for p in &d.predictions {
        seen.entry(&p.predictor)
            .or_insert((p.synthetic, &p.calibration));
    }
    if seen.is_empty() {
        return;
    }
    out.push_str("<h3>Predictors</h3>\n<div class=\"scroll\"><table><tr><th>predictor (model id)</th><th>kind</th><th>calibration</th></tr>\n");
    for (id, (synthetic, calibration)) in seen {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            producer_html(Some(id)),
            if synthetic {
                "synthetic (trained on generated data: not an empathy model)"
            } else if crate::core::BUILTIN_PREDICTORS.contains(&id) {
                "built in (cosine of what was said to the story; trained on no ratings)"
            } else {
                "trained fusion model"
            },
            esc(calibration)
        );
    }
    out.push_str("</table></div>\n");
    note(out, "The model files' sha256s are in the models folder's manifest (`empathic models verify` checks them).");
}

/// The top of the page: the quality verdict and, per story shown, what was predicted
/// against what the participant rated.
pub(super) fn glance(
    out: &mut String,
    d: &SessionDetail,
    quality: Option<&crate::report::QualityReport>,
) {
    section(out, SESSION_SECTIONS[0]);
    out.push_str("<div class=\"glance\">\n");
    match quality {
        None => note(out, "Data quality: not known (the session did not finish, so no quality report was stored)."),
        Some(q) => {
            let rows = verdict::quality_rows(q);
            let (worst, flagged) =
                verdict::overall(&rows, &d.summary.status, d.summary.duration_secs);
            let _ = writeln!(
                out,
                "<p>Data quality: <b class=\"{}\">{}</b>{}</p>",
                worst.class(),
                worst.class(),
                if flagged.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", esc(&flagged.join("; ")))
                }
            );
        }
    }
    let shown: Vec<_> = d.stories.iter().collect();
    if shown.is_empty() {
        note(out, "No story was shown in this session.");
    } else {
        let mut predictors: Vec<(&str, &str)> = Vec::new();
        for p in d.predictions.iter().filter(|p| !p.retrieved) {
            if !predictors.iter().any(|(id, _)| *id == p.predictor) {
                predictors.push((
                    &p.predictor,
                    crate::fusion::calibration_word(&p.predictor, &p.calibration, p.synthetic),
                ));
            }
        }
        out.push_str(
            "<div class=\"scroll\"><table><tr><th>story shown</th><th>self-rating (1-5)</th>",
        );
        for (id, word) in &predictors {
            let _ = write!(
                out,
                "<th>predicted by {} <span class=\"synthetic\">[{word}]</span></th>",
                esc(id),
            );
        }
        out.push_str("</tr>\n");
        for st in shown {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td>",
                esc(&st.title),
                st.rating.map_or("not rated".into(), |r| r.to_string())
            );
            for (id, _) in &predictors {
                let score = d
                    .predictions
                    .iter()
                    .find(|p| !p.retrieved && p.predictor == *id && p.story_id == st.story_id)
                    .map_or("-".into(), |p| format!("{:.2}", p.score));
                let _ = write!(out, "<td>{score}</td>");
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table></div>\n");
    }
    out.push_str("</div>\n");
}
