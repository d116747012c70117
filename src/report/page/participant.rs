//! The participant page: one row or point per session of a participant, oldest first.

use super::*;

/// The longitudinal page of `participant`: one row or point per session, oldest first.
pub fn participant_page(store: &Store, participant: &str) -> Result<String, PageError> {
    let ids = store.participant_sessions(participant)?;
    if ids.is_empty() {
        return Err(PageError::NoSuchParticipant {
            id: participant.to_string(),
            path: store.path().to_path_buf(),
        });
    }
    let details: Vec<SessionDetail> = ids
        .iter()
        .map(|id| store.session_detail(id))
        .collect::<Result<_, _>>()?;
    let starts: Vec<Option<String>> = ids
        .iter()
        .map(|id| store.start_time(id))
        .collect::<Result<_, _>>()?;
    let mut out = head(&format!("empathic participant report: {participant}"));
    let _ = writeln!(
        out,
        "<h1>Participant {}</h1>\n<p class=\"note\">empathic {} participant report: every \
         session of this participant in {}, oldest first.</p>",
        esc(participant),
        env!("CARGO_PKG_VERSION"),
        esc(&store.path().display().to_string())
    );
    section(&mut out, PARTICIPANT_SECTIONS[0]);
    out.push_str("<table><tr><th>#</th><th>session</th><th>date</th><th>station</th><th>status</th><th>duration</th><th>stories</th></tr>\n");
    for (k, (d, start)) in details.iter().zip(&starts).enumerate() {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td></tr>",
            k + 1,
            esc(&d.summary.id),
            esc(start.as_deref().unwrap_or(&d.summary.created_at)),
            esc(&d.summary.station_id),
            esc(&d.summary.status),
            d.summary
                .status_reason
                .as_deref()
                .map(|r| format!(": {}", esc(r)))
                .unwrap_or_default(),
            plots::mmss(d.summary.duration_secs),
            d.stories.len()
        );
    }
    out.push_str("</table>\n");

    // Ratings per session
    section(&mut out, PARTICIPANT_SECTIONS[1]);
    let rated: Vec<(f64, f64)> = details
        .iter()
        .enumerate()
        .flat_map(|(k, d)| {
            d.stories
                .iter()
                .filter_map(move |s| s.rating.map(|r| ((k + 1) as f64, f64::from(r))))
        })
        .collect();
    if rated.is_empty() {
        note(&mut out, "No self-ratings stored.");
    } else {
        plot(
            &mut out,
            super::plots::session_chart(
                "self-rating (1-5)",
                (0.5, 5.5),
                details.len(),
                &[Series {
                    label: "self-rating of a story".into(),
                    points: rated,
                    color: PALETTE[0],
                    dots: true,
                    dashed: false,
                }],
            ),
        )?;
    }
    out.push_str("<table><tr><th>#</th><th>session</th><th>stories and self-ratings</th></tr>\n");
    for (k, d) in details.iter().enumerate() {
        let stories: Vec<String> = d
            .stories
            .iter()
            .map(|s| {
                format!(
                    "{} ({})",
                    esc(&s.title),
                    s.rating.map_or("not rated".into(), |r| r.to_string())
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            k + 1,
            esc(&d.summary.id),
            if stories.is_empty() {
                "-".into()
            } else {
                stories.join("; ")
            }
        );
    }
    out.push_str("</table>\n");

    // Predictions against ratings
    section(&mut out, PARTICIPANT_SECTIONS[2]);
    // Per predictor: what its maps were fitted to (one word, as the session page says it;
    // several when that changed over the sessions), and the (rating, predicted) pairs.
    type Rated = (Vec<&'static str>, Vec<(f64, f64)>);
    let mut by_predictor: BTreeMap<String, Rated> = BTreeMap::new();
    for d in &details {
        for p in d.predictions.iter().filter(|p| !p.retrieved) {
            if let Some(r) = p.rating {
                let e = by_predictor.entry(p.predictor.clone()).or_default();
                let word =
                    crate::fusion::calibration_word(&p.predictor, &p.calibration, p.synthetic);
                if !e.0.contains(&word) {
                    e.0.push(word);
                }
                e.1.push((f64::from(r), p.score));
            }
        }
    }
    if by_predictor.is_empty() {
        note(
            &mut out,
            "No session-level prediction toward a rated story is stored for this participant.",
        );
    } else {
        let series: Vec<Series> = by_predictor
            .iter()
            .enumerate()
            .map(|(i, (id, (words, pts)))| Series {
                label: format!("{id} [{}]", words.join(", then ")),
                points: pts.clone(),
                color: PALETTE[i % PALETTE.len()],
                dots: true,
                dashed: false,
            })
            .collect();
        plot(
            &mut out,
            super::plots::scatter("self-rating (1-5)", "predicted (1-5)", &series),
        )?;
        note(&mut out, "One point per rated story and predictor: the session-level prediction (mean over the windows after the story was shown) against the self-rating. Points on the diagonal are right.");
    }

    // Surveys
    section(&mut out, PARTICIPANT_SECTIONS[3]);
    let surveys = store.surveys(participant)?;
    if surveys.is_empty() {
        note(&mut out, "No survey answers stored.");
    } else {
        let mut grid: BTreeMap<(String, String), [Option<f64>; 3]> = BTreeMap::new();
        for r in &surveys {
            let k = match r.time_point.as_str() {
                "pre_study" => 0,
                "mid_study" => 1,
                _ => 2,
            };
            grid.entry((r.instrument.clone(), r.item.clone()))
                .or_default()[k] = Some(r.value);
        }
        out.push_str("<table><tr><th>instrument</th><th>item</th><th>pre-study</th><th>mid-study</th><th>post-study</th></tr>\n");
        for ((instrument, item), v) in grid {
            let cell = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x}"));
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&instrument),
                esc(&item),
                cell(v[0]),
                cell(v[1]),
                cell(v[2])
            );
        }
        out.push_str("</table>\n");
    }

    // Data quality per session
    section(&mut out, PARTICIPANT_SECTIONS[4]);
    let measures = verdict::MEASURES;
    out.push_str("<table><tr><th>#</th><th>session</th>");
    for m in measures {
        let _ = write!(out, "<th>{}</th>", esc(m));
    }
    out.push_str("</tr>\n");
    for (k, d) in details.iter().enumerate() {
        let _ = write!(out, "<tr><td>{}</td><td>{}</td>", k + 1, esc(&d.summary.id));
        match d
            .summary
            .quality
            .clone()
            .and_then(|q| serde_json::from_value::<crate::report::QualityReport>(q).ok())
        {
            None => {
                let _ = write!(
                    out,
                    "<td colspan=\"{}\">no quality report ({})</td>",
                    measures.len(),
                    esc(&d.summary.status)
                );
            }
            Some(q) => {
                for row in verdict::quality_rows(&q) {
                    let _ = write!(
                        out,
                        "<td class=\"{}\">{}</td>",
                        row.verdict.class(),
                        esc(&row.value)
                    );
                }
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    note(&mut out, "Cell colours: green good, yellow check, red bad; the thresholds are in each session's report.");
    out.push_str("</body></html>\n");
    Ok(out)
}
