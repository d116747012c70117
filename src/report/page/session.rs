//! The session page: a summary at a glance, then the timeline, predicted empathy, facial
//! behaviour, voice, data quality, transcript and an appendix, one function per section
//! over what the page's head read once (`section::Section`). The sections of the participant's
//! face and voice (per-frame signals drawn over time) are in `signals.rs`.

use super::*;

use super::frames::*;
use super::section::Section;
use super::signals::{face_section, voice_section};
use super::summary::*;

/// The session report of session `id`.
pub fn session_page(store: &Store, id: &str, opts: &PageOptions) -> Result<String, PageError> {
    let d: SessionDetail = store.session_detail(id)?;
    let s = &d.summary;
    let start_time = store.start_time(id)?;
    let duration = s.duration_secs.max(0.0);
    // Only for a database without frame rows (`frames.rs` draws each frame at its stored
    // time): frames on the nominal grid.
    let fps = crate::config::DEFAULT_FPS;
    let mut out = head(&format!("empathic session report: {}", s.id));
    let _ = writeln!(
        out,
        "<h1>Session {}</h1>\n<p class=\"note\">empathic {} session report. Raw video and audio \
         never appear in it; only figures derived from them.</p>",
        esc(&s.id),
        env!("CARGO_PKG_VERSION")
    );
    if s.status != "complete" {
        let _ = writeln!(
            out,
            "<div class=\"banner\"><b>This session is {}</b>{}. What was stored before it \
             stopped is shown; sections without data say so.</div>",
            esc(&s.status),
            s.status_reason
                .as_deref()
                .map(|r| format!(": {}", esc(r)))
                .unwrap_or_default()
        );
    }

    let quality = s
        .quality
        .clone()
        .and_then(|q| serde_json::from_value::<crate::report::QualityReport>(q).ok());
    for f in quality.iter().flat_map(|q| &q.stage_failures) {
        let _ = writeln!(
            out,
            "<div class=\"banner\"><b>Stage {} failed at {}</b>: {}. The session went on \
             without it: its modality is missing from then on.</div>",
            esc(&f.stage),
            plots::mmss(f.at_ms as f64 / 1e3),
            esc(&f.error)
        );
    }
    glance(&mut out, &d, quality.as_ref());
    let phase_bands: Vec<(f64, f64, String, plotters::style::RGBColor)> = d
        .phases
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                p.start_secs,
                p.end_secs.unwrap_or(duration),
                p.phase.clone(),
                phase_color(i),
            )
        })
        .collect();

    // Session
    section(&mut out, SESSION_SECTIONS[1]);
    let modalities = store.export_reads().modalities(id)?;
    let frame_source = FrameSource {
        store,
        id,
        modalities: &modalities,
        fps,
        frames: s.frames,
    };
    let _ = writeln!(
        out,
        "<table><tr><th>session</th><td>{}</td></tr><tr><th>station</th><td>{}</td></tr>\
         <tr><th>participant</th><td>{}</td></tr><tr><th>date</th><td>{}</td></tr>\
         <tr><th>duration</th><td>{} ({} frames, {} windows)</td></tr>\
         <tr><th>status</th><td>{}{}</td></tr><tr><th>source</th><td>{}</td></tr></table>",
        esc(&s.id),
        esc(&s.station_id),
        esc(s.participant_id.as_deref().unwrap_or("(none)")),
        esc(start_time.as_deref().unwrap_or(&s.created_at)),
        plots::mmss(duration),
        s.frames,
        s.windows,
        esc(&s.status),
        s.status_reason
            .as_deref()
            .map(|r| format!(": {}", esc(r)))
            .unwrap_or_default(),
        esc(&s.source),
    );
    if let Some(c) = &d.synced_content {
        note(
            &mut out,
            &format!("This is {}.", crate::report::synced_summary(c)),
        );
    }
    note(
        &mut out,
        "What produced each modality, with its version and presence, is in the appendix at the end.",
    );

    let utterances = store.utterances(id)?;
    let cx = Section {
        store,
        id,
        d: &d,
        duration,
        phase_bands: &phase_bands,
        frame_source: &frame_source,
        utterances: &utterances,
        quality: quality.as_ref(),
        opts,
        modalities: &modalities,
    };
    timeline_section(&mut out, &cx)?;
    prediction_section(&mut out, &cx)?;
    face_section(&mut out, &cx)?;
    voice_section(&mut out, &cx)?;
    quality_section(&mut out, &cx)?;
    transcript_section(&mut out, &cx)?;
    appendix_section(&mut out, &cx)?;
    out.push_str("</body></html>\n");
    Ok(out)
}

/// The story markers of the timeline and the prediction plot: `S<position>` and the
/// self-rating.
fn story_markers(d: &SessionDetail) -> Vec<Marker> {
    d.stories
        .iter()
        .map(|st| Marker {
            secs: st.shown_secs,
            label: format!(
                "S{}{}",
                st.position,
                st.rating.map(|r| format!(" ({r})")).unwrap_or_default()
            ),
        })
        .collect()
}

/// The session page's Timeline section.
fn timeline_section(out: &mut String, cx: &Section<'_>) -> Result<(), PageError> {
    let Section {
        d,
        duration,
        phase_bands,
        utterances,
        ..
    } = *cx;
    section(out, SESSION_SECTIONS[2]);
    let mut lanes = vec![Lane {
        label: "phase".into(),
        spans: phase_bands.to_vec(),
    }];
    for (speaker, color) in [("participant", PALETTE[2]), ("robot", PALETTE[1])] {
        let spans: Vec<_> = utterances
            .iter()
            .filter(|u| u.speaker == speaker)
            .map(|u| (u.start_secs, u.end_secs, String::new(), color))
            .collect();
        let transcripts_synced = d.synced_content.as_ref().is_none_or(|c| c.transcripts);
        lanes.push(Lane {
            label: if transcripts_synced {
                format!("{speaker} speaks")
            } else {
                format!("{speaker} speaks (not synced)")
            },
            spans,
        });
    }
    let story_markers = story_markers(d);
    if d.phases.is_empty() && utterances.is_empty() && d.stories.is_empty() {
        note(out, "No phases, utterances or stories were stored for this session (a recording without events, or one that stopped before them).");
    }
    plot(out, plots::timeline(&lanes, &story_markers, duration))?;
    if d.stories.is_empty() {
        note(out, "No story was shown in this session.");
    } else {
        out.push_str("<table><tr><th>marker</th><th>story</th><th>shown at</th><th>self-rating (1-5)</th></tr>\n");
        for st in &d.stories {
            let _ = writeln!(
                out,
                "<tr><td>S{}</td><td>{} <span class=\"note\">{}{}</span></td><td>{}</td><td>{}</td></tr>",
                st.position,
                esc(&st.title),
                esc(&st.story_id),
                if st.differs_from_bank {
                    " (the words shown differ from the stored story of this id; the exposure keeps what was shown)"
                } else {
                    ""
                },
                plots::mmss(st.shown_secs),
                st.rating.map_or("not rated".into(), |r| r.to_string())
            );
        }
        out.push_str("</table>\n");
    }

    Ok(())
}

/// The session page's Predicted empathy section.
fn prediction_section(out: &mut String, cx: &Section<'_>) -> Result<(), PageError> {
    let Section {
        store,
        id,
        d,
        duration,
        phase_bands,
        ..
    } = *cx;
    section(out, SESSION_SECTIONS[3]);
    let series = store.prediction_series(id)?;
    if series.is_empty() {
        note(out, "No predictions were stored for this session (prediction off, no story in play in a predicted phase, or the session stopped before).");
    } else {
        let mut by_predictor: BTreeMap<&str, Vec<&crate::store::PredictionPoint>> = BTreeMap::new();
        for p in &series {
            by_predictor.entry(&p.predictor).or_default().push(p);
        }
        for (predictor, points) in by_predictor {
            let synthetic = points.iter().any(|p| p.synthetic);
            let label = points.first().map_or("", |p| {
                crate::fusion::calibration_label(&p.predictor, &p.calibration, synthetic)
            });
            let _ = writeln!(
                out,
                "<h3>{} <span class=\"synthetic\">[{}]</span></h3>",
                esc(predictor),
                esc(label)
            );
            // The windows' hop: the smallest step between two window ends of this predictor.
            let mut ends: Vec<f64> = points.iter().map(|p| p.end_secs).collect();
            ends.sort_by(f64::total_cmp);
            let hop_secs = ends
                .windows(2)
                .map(|w| w[1] - w[0])
                .filter(|d| *d > 1e-6)
                .fold(f64::INFINITY, f64::min);
            let hop_secs = if hop_secs.is_finite() { hop_secs } else { 1.0 };
            let mut stories: BTreeMap<(bool, &str), Vec<(f64, f64)>> = BTreeMap::new();
            for p in points {
                stories
                    .entry((p.retrieved, &p.story_id))
                    .or_default()
                    .push((p.end_secs, p.score));
            }
            let title = |story: &str| {
                d.stories
                    .iter()
                    .find(|st| st.story_id == story)
                    .map(|st| st.title.clone())
                    .or_else(|| {
                        d.predictions
                            .iter()
                            .find(|p| p.story_id == story)
                            .and_then(|p| p.title.clone())
                    })
                    .unwrap_or_else(|| story.to_string())
            };
            // Shown stories: each its colour, its self-rating a dashed line in that colour
            // from when it was shown. Retrieved ones (while sharing) in a plot of their own.
            for (retrieved, heading) in [
                (
                    false,
                    "Stories shown (dashed: the participant's self-rating)",
                ),
                (true, "Stories retrieved while the participant shared"),
            ] {
                let mut lines = Vec::new();
                for (i, ((_, story), pts)) in stories
                    .iter()
                    .filter(|((r, _), _)| *r == retrieved)
                    .enumerate()
                {
                    let color = PALETTE[i % PALETTE.len()];
                    // Windows come every hop: a longer step is a stretch without predictions
                    // toward this story, drawn as a gap.
                    let mut line =
                        Series::new(title(story), plots::with_gaps(pts, 1.5 * hop_secs), color);
                    line.dots = pts.len() < 3;
                    lines.push(line);
                    let shown = d.stories.iter().find(|st| st.story_id == *story);
                    if let (false, Some(st)) = (retrieved, shown) {
                        if let Some(r) = st.rating {
                            let r = f64::from(r);
                            let mut rated = Series::new(
                                format!("{}: rated {r}", st.title),
                                vec![(st.shown_secs, r), (duration, r)],
                                color,
                            );
                            rated.dashed = true;
                            lines.push(rated);
                        }
                    }
                }
                if lines.is_empty() {
                    continue;
                }
                let _ = writeln!(out, "<h4>{heading}</h4>");
                plot(
                    out,
                    plots::line_chart(
                        "predicted empathy (1-5), window end",
                        (1.0, 5.0),
                        duration,
                        &lines,
                        &Backdrop {
                            phases: phase_bands,
                            markers: &story_markers(d),
                        },
                    ),
                )?;
                out.push_str(&plots::legend_html(&lines));
            }
        }
        out.push_str("<table><tr><th>predictor</th><th>story</th><th>in play</th><th>windows</th><th>mean predicted (1-5)</th><th>self-rating</th></tr>\n");
        for p in &d.predictions {
            let _ = writeln!(
                out,
                "<tr><td>{} <span class=\"synthetic\">[{}]</span></td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td></tr>",
                esc(&p.predictor),
                crate::fusion::calibration_word(&p.predictor, &p.calibration, p.synthetic),
                esc(p.title.as_deref().unwrap_or(&p.story_id)),
                if p.retrieved { "retrieved" } else { "shown" },
                p.windows,
                p.score,
                p.rating.map_or("-".into(), |r| r.to_string())
            );
        }
        out.push_str("</table>\n");
        note(out, "Session-level prediction: the mean over the predicted windows after the story was shown (while sharing: toward the stories retrieved for what was said).");
        super::why::why_panel(out, cx)?;
    }

    Ok(())
}

/// The session page's Data quality section.
fn quality_section(out: &mut String, cx: &Section<'_>) -> Result<(), PageError> {
    let Section { quality, .. } = *cx;
    section(out, SESSION_SECTIONS[6]);
    match &quality {
        None => note(out, "No quality report was stored: the session did not finish (the report is computed at the end of a run)."),
        Some(q) => {
            out.push_str("<table><tr><th>measure</th><th>value</th><th>verdict</th><th>threshold (good / check; beyond: bad)</th></tr>\n");
            let rows = verdict::quality_rows(q);
            for row in &rows {
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
                    esc(row.measure),
                    esc(&row.value),
                    row.verdict.class(),
                    row.verdict.class(),
                    esc(row.threshold)
                );
            }
            out.push_str("</table>\n");
            let (status, secs) = (&cx.d.summary.status, cx.d.summary.duration_secs);
            let (worst, _) = verdict::overall(&rows, status, secs);
            let unfinished = verdict::unfinished(status, secs)
                .map(|u| format!(" {}.", esc(&u)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "<p>Overall: <b class=\"{}\">{}</b>{}{}</p>",
                worst.class(),
                worst.class(),
                match worst {
                    Verdict::Good => " — nothing to do.",
                    Verdict::Check => " — look at the rows marked check before the next session.",
                    Verdict::Bad => " — the station probably needs a visit (rows marked bad).",
                },
                unfinished
            );
        }
    }

    Ok(())
}

/// The session page's Transcript section.
fn transcript_section(out: &mut String, cx: &Section<'_>) -> Result<(), PageError> {
    let Section {
        d,
        utterances,
        opts,
        ..
    } = *cx;
    section(out, SESSION_SECTIONS[7]);
    let said: Vec<_> = utterances
        .iter()
        .filter(|u| u.speaker == "participant")
        .collect();
    if d.synced_content.as_ref().is_some_and(|c| !c.transcripts) {
        note(out, "The participant's utterances are not synced to this database (`[sync] transcripts = false` on the station).");
    } else if !opts.transcript {
        let _ = writeln!(
            out,
            "<p class=\"note\">Not shown: {} participant utterance(s) stored. Set <code>[report] transcript = true</code> to include them.</p>",
            said.len()
        );
    } else if said.is_empty() {
        note(out, "The participant said nothing that was transcribed.");
    } else {
        if said.iter().any(|u| u.source == "asr") {
            note(out, "Words heard by the station were recognised on the station itself (Moonshine tiny-en, no audio leaves it); recognition makes mistakes (docs/features.md gives its word error rates), and these are the words the text modality and the predictions used.");
        }
        out.push_str("<table><tr><th>time</th><th>participant</th><th>heard by</th></tr>\n");
        for u in said {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                plots::mmss(u.start_secs),
                esc(&u.text),
                if u.source == "asr" {
                    "station"
                } else {
                    "dialogue app"
                }
            );
        }
        out.push_str("</table>\n");
    }

    Ok(())
}

/// The session page's Appendix section.
fn appendix_section(out: &mut String, cx: &Section<'_>) -> Result<(), PageError> {
    let Section { d, modalities, .. } = *cx;
    let s = &d.summary;
    section(out, SESSION_SECTIONS[8]);
    out.push_str("<h3>Modalities</h3>\n<div class=\"scroll\"><table><tr><th>modality</th><th>values a frame</th><th>producer</th><th>layout version</th><th>present on</th></tr>\n");
    for m in modalities {
        let present = d
            .modalities
            .iter()
            .find(|r| r.name == m.name)
            .map_or(0, |r| r.present_frames);
        let present = match &d.synced_content {
            Some(c) if !c.frame_features => "not synced here".to_string(),
            _ => format!("{present} of {} frames", s.frames),
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{present}</td></tr>",
            esc(&m.name),
            m.dims,
            producer_html(m.producer.as_deref()),
            m.layout_version.map_or("-".into(), |v| v.to_string()),
        );
    }
    out.push_str("</table></div>\n");
    predictors_appendix(out, d);
    Ok(())
}
