//! The store's read side: the read models of sessions, predictions, phases and stories, and
//! the queries the commands, the report and the runtime's set-up make. Reads use the
//! store's own connection and never block the writer (WAL).

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use super::{sql, Store, StoreError};

/// A session as listed by `empathic sessions list`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SessionSummary {
    pub id: String,
    pub status: String,
    pub status_reason: Option<String>,
    pub station_id: String,
    pub participant_id: Option<String>,
    pub source: String,
    pub source_path: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub frames: u64,
    pub windows: u64,
    pub duration_secs: f64,
    /// The quality report stored at the end of the run (see `report::QualityReport`).
    pub quality: Option<serde_json::Value>,
}

/// One window's prediction toward one story with what moved it (`attributions`).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAttribution {
    pub window_index: u64,
    /// The window's end on the session timeline (ns).
    pub end_ns: u64,
    pub predictor: String,
    pub story_id: String,
    pub retrieved: bool,
    pub score: f64,
    pub synthetic: bool,
    pub calibration: String,
    /// Per modality of the predictor, the share of the window's frames present.
    pub coverage: std::collections::BTreeMap<String, f64>,
    pub attribution: crate::core::Attribution,
}

/// A session-level prediction toward one story: the mean over every predicted window of
/// the configured phases after the story was shown, beside the participant's self-rating.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StoryPrediction {
    pub predictor: String,
    pub story_id: String,
    /// Retrieved while the participant shared (windows before any story was shown), or
    /// shown (windows after it was shown).
    pub retrieved: bool,
    pub title: Option<String>,
    pub windows: u64,
    /// Mean calibrated score (1-5).
    pub score: f64,
    pub raw_cosine: f64,
    pub rating: Option<u8>,
    pub synthetic: bool,
    /// `predictions.calibration` of its windows (the last when they differ): `population`
    /// or `participant:N` (see `fusion::uncalibrated`).
    pub calibration: String,
}

/// A session with what it contains, for `empathic sessions show`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SessionDetail {
    #[serde(flatten)]
    pub summary: SessionSummary,
    pub phases: Vec<PhaseRow>,
    pub events: u64,
    pub utterances: u64,
    pub stories: Vec<StoryExposureRow>,
    pub modalities: Vec<ModalityRow>,
    pub predictions: Vec<StoryPrediction>,
    /// In a central database: which optional tables the session's record carried (the
    /// rest, and the raw event log, were never synced here). `None` on a station's own
    /// database, which holds everything it stored.
    pub synced_content: Option<crate::config::SyncContent>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PhaseRow {
    pub phase: String,
    pub start_secs: f64,
    pub end_secs: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StoryExposureRow {
    pub position: u32,
    pub story_id: String,
    pub title: String,
    pub shown_secs: f64,
    pub rating: Option<u8>,
    /// The participant saw another title or text than the stored story of this id (the
    /// title above is the one shown; the text shown is on the exposure row).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub differs_from_bank: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModalityRow {
    pub name: String,
    pub stream: String,
    pub dims: u32,
    /// Frames where the modality is present, out of `frames`.
    pub present_frames: u64,
}

/// The reads of `export windows`.
pub struct ExportReads<'a>(&'a Connection);

impl ExportReads<'_> {
    pub fn sessions(
        &self,
        only: Option<&str>,
    ) -> Result<Vec<(String, Option<String>, String)>, StoreError> {
        sql::export::sessions(self.0, only)
    }
    pub fn modalities(&self, id: &str) -> Result<Vec<sql::export::ExportModality>, StoreError> {
        sql::export::modalities(self.0, id)
    }
    pub fn frame_count(&self, id: &str) -> Result<u64, StoreError> {
        sql::export::frame_count(self.0, id)
    }
    pub fn frame_vectors(
        &self,
        id: &str,
        modality: &str,
        each: impl FnMut(u64, Vec<f32>),
    ) -> Result<(), StoreError> {
        sql::export::frame_vectors(self.0, id, modality, each)
    }
    pub fn events(&self, id: &str) -> Result<Vec<(u64, String, String)>, StoreError> {
        sql::export::events(self.0, id)
    }
    pub fn frame_times(&self, id: &str) -> Result<Vec<(u64, u64)>, StoreError> {
        sql::export::frame_times(self.0, id)
    }
    pub fn windows(
        &self,
        id: &str,
        phase: Option<&str>,
    ) -> Result<Vec<sql::export::ExportWindow>, StoreError> {
        sql::export::windows(self.0, id, phase)
    }
    pub fn window_means(
        &self,
        id: &str,
        modality: &str,
        each: impl FnMut(u64, u64, Option<Vec<f32>>),
    ) -> Result<(), StoreError> {
        sql::export::window_means(self.0, id, modality, each)
    }
    /// The sentence encoders the story bank was embedded with.
    pub fn story_encoders(&self) -> Result<Vec<String>, StoreError> {
        sql::export::story_encoders(self.0)
    }
    /// Every story's id, title and text, by id.
    pub fn stories(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        sql::export::stories(self.0)
    }
    /// Every story embedded with `model`, by id.
    pub fn story_embeddings(
        &self,
        model: &str,
    ) -> Result<Vec<sql::stories::StoredEmbedding>, StoreError> {
        sql::stories::embeddings(self.0, model)
    }
}

impl Store {
    /// Session `id`'s predictions per predictor and story (see [`StoryPrediction`]), in the
    /// order the stories were shown.
    pub fn session_predictions(&self, id: &str) -> Result<Vec<StoryPrediction>, StoreError> {
        self.conn
            .prepare(
                "SELECT p.predictor, p.story_id, s.title, count(*), avg(p.score),
                        avg(p.raw_cosine), max(p.synthetic), r.value, p.in_play = 'retrieved',
                        max(p.calibration)
                 FROM predictions p
                 LEFT JOIN stories s ON s.id = p.story_id
                 LEFT JOIN self_ratings r ON r.session_id = p.session_id AND r.story_id = p.story_id
                 LEFT JOIN story_exposures e ON e.session_id = p.session_id AND e.story_id = p.story_id
                 WHERE p.session_id = ?1
                 GROUP BY p.predictor, p.in_play, p.story_id
                 ORDER BY p.predictor, p.in_play DESC, e.position, p.story_id",
            )
            .and_then(|mut st| {
                st.query_map([id], |r| {
                    Ok(StoryPrediction {
                        predictor: r.get(0)?,
                        story_id: r.get(1)?,
                        title: r.get(2)?,
                        windows: r.get::<_, i64>(3)?.max(0) as u64,
                        score: r.get(4)?,
                        raw_cosine: r.get::<_, Option<f64>>(5)?.unwrap_or(f64::NAN),
                        synthetic: r.get::<_, i64>(6)? != 0,
                        rating: r.get(7)?,
                        retrieved: r.get(8)?,
                        calibration: r.get(9)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading predictions"))
    }

    /// Session `id`'s attributed predictions, window by window (window, predictor, story).
    pub fn session_attributions(&self, id: &str) -> Result<Vec<StoredAttribution>, StoreError> {
        type Raw = (StoredAttribution, String, String);
        let rows: Vec<Raw> = self
            .conn
            .prepare(
                "SELECT a.window_index, COALESCE(w.end_ns, 0), a.predictor, a.story_id,
                        p.in_play = 'retrieved', p.score, p.synthetic, p.calibration, p.coverage,
                        a.baseline, a.method, a.coalitions, a.cues
                 FROM attributions a
                 JOIN predictions p ON p.session_id = a.session_id
                   AND p.window_index = a.window_index AND p.predictor = a.predictor
                   AND p.story_id = a.story_id
                 LEFT JOIN windows w ON w.session_id = a.session_id
                   AND w.window_index = a.window_index
                 WHERE a.session_id = ?1
                 ORDER BY a.window_index, a.predictor, a.story_id",
            )
            .and_then(|mut st| {
                st.query_map([id], |r| {
                    Ok((
                        StoredAttribution {
                            window_index: r.get::<_, i64>(0)?.max(0) as u64,
                            end_ns: r.get::<_, i64>(1)?.max(0) as u64,
                            predictor: r.get(2)?,
                            story_id: r.get(3)?,
                            retrieved: r.get(4)?,
                            score: r.get(5)?,
                            synthetic: r.get::<_, i64>(6)? != 0,
                            calibration: r.get(7)?,
                            coverage: Default::default(),
                            attribution: crate::core::Attribution {
                                baseline: r.get(9)?,
                                method: r.get(10)?,
                                coalitions: r.get::<_, i64>(11)?.max(0) as usize,
                                cues: Vec::new(),
                            },
                        },
                        r.get::<_, String>(8)?,
                        r.get::<_, String>(12)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading attributions"))?;
        rows.into_iter()
            .map(|(mut a, coverage, cues)| {
                let bad = |what: &str, e: serde_json::Error| StoreError::Invalid {
                    message: format!(
                        "session {id}, window {}, predictor `{}`, story `{}`: stored {what} is not valid JSON: {e}",
                        a.window_index, a.predictor, a.story_id
                    ),
                };
                a.coverage = serde_json::from_str(&coverage).map_err(|e| bad("coverage", e))?;
                a.attribution.cues =
                    serde_json::from_str(&cues).map_err(|e| bad("attribution", e))?;
                Ok(a)
            })
            .collect()
    }

    /// Window predictions toward stories shown and rated, from complete sessions (see
    /// `fusion::evaluate`); `phase` keeps only windows of that phase. Also returns how
    /// many predictions there are at all under the filters.
    pub fn rated_predictions(
        &self,
        predictor: Option<&str>,
        phase: Option<&str>,
    ) -> Result<(Vec<crate::core::RatedWindow>, u64), StoreError> {
        let filter = "FROM predictions p
             JOIN sessions ses ON ses.id = p.session_id AND ses.status = 'complete'
             LEFT JOIN windows w ON w.session_id = p.session_id AND w.window_index = p.window_index
             WHERE p.in_play = 'shown' AND (?1 IS NULL OR p.predictor = ?1)
               AND (?2 IS NULL OR w.phase = ?2)";
        let total: i64 = self
            .conn
            .query_row(
                &format!("SELECT count(*) {filter}"),
                params![predictor, phase],
                |r| r.get(0),
            )
            .map_err(sql("counting predictions"))?;
        let rows = self
            .conn
            .prepare(&format!(
                "SELECT p.predictor, COALESCE(ses.participant_id, ses.id), p.session_id,
                        p.story_id, p.score, p.raw_cosine, r.value, p.synthetic, p.calibration
                 {filter_rated}
                 ORDER BY p.predictor, ses.created_at, p.session_id, p.story_id, p.window_index",
                filter_rated = filter.replace(
                    "LEFT JOIN windows",
                    "JOIN self_ratings r ON r.session_id = p.session_id AND r.story_id = p.story_id
             LEFT JOIN windows"
                )
            ))
            .and_then(|mut st| {
                st.query_map(params![predictor, phase], |r| {
                    Ok(crate::core::RatedWindow {
                        predictor: r.get(0)?,
                        participant: r.get(1)?,
                        session_id: r.get(2)?,
                        story_id: r.get(3)?,
                        score: r.get(4)?,
                        raw_cosine: r.get(5)?,
                        rating: f64::from(r.get::<_, i64>(6)? as i32),
                        synthetic: r.get::<_, i64>(7)? != 0,
                        calibration: r.get(8)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading rated predictions"))?;
        Ok((rows, total.max(0) as u64))
    }

    /// Stories shown to `participant` in their sessions before this one (by `start_time`,
    /// else by when they were stored): retrieval leaves them out.
    pub fn stories_seen_before(
        &self,
        participant: &str,
        session_id: &str,
        start_time: Option<&str>,
    ) -> Result<Vec<String>, StoreError> {
        self.conn
            .prepare(
                "SELECT DISTINCT e.story_id FROM story_exposures e
                 JOIN sessions s ON s.id = e.session_id AND s.participant_id = ?1 AND s.id != ?2
                   AND COALESCE(s.start_time, s.created_at) < COALESCE(?3, '9999')
                 ORDER BY e.story_id",
            )
            .and_then(|mut st| {
                st.query_map(params![participant, session_id, start_time], |r| r.get(0))?
                    .collect::<Result<Vec<String>, _>>()
            })
            .map_err(sql("reading stories seen before"))
    }

    /// (mean raw cosine, self-rating) per rated story of `participant`'s complete sessions
    /// before this one (by `start_time`, else by when they were stored), for `predictor`:
    /// what per-participant calibration may learn from, never the session itself.
    pub fn calibration_pairs(
        &self,
        participant: &str,
        predictor: &str,
        session_id: &str,
        start_time: Option<&str>,
    ) -> Result<Vec<(f64, f64)>, StoreError> {
        self.conn
            .prepare(
                "SELECT avg(p.raw_cosine), r.value FROM predictions p
                 JOIN sessions s ON s.id = p.session_id AND s.status = 'complete'
                   AND s.participant_id = ?1 AND s.id != ?3
                   AND COALESCE(s.start_time, s.created_at) < COALESCE(?4, '9999')
                 JOIN self_ratings r ON r.session_id = p.session_id AND r.story_id = p.story_id
                 WHERE p.predictor = ?2 AND p.in_play = 'shown' AND p.raw_cosine IS NOT NULL
                 GROUP BY p.session_id, p.story_id
                 ORDER BY p.session_id, p.story_id",
            )
            .and_then(|mut st| {
                st.query_map(
                    params![participant, predictor, session_id, start_time],
                    |r| Ok((r.get::<_, f64>(0)?, f64::from(r.get::<_, i64>(1)? as i32))),
                )?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading calibration history"))
    }

    /// Every session that has ended: its id, when its row was last written (its end, RFC
    /// 3339 UTC) and the boot it was written in (`/proc/sys/kernel/random/boot_id`), for
    /// raw-media retention.
    pub fn session_ends(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, updated_at, coalesce(owner_boot_id, '') FROM sessions
                 WHERE status <> 'running'",
            )
            .map_err(sql("reading when sessions ended"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(sql("reading when sessions ended"))?;
        Ok(rows)
    }

    /// Every session, newest first.
    pub fn list_sessions(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("{SUMMARY_SELECT} ORDER BY created_at DESC, id"))
            .map_err(sql("listing sessions"))?;
        let rows = stmt
            .query_map([], summary_from_row)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(sql("listing sessions"))?;
        Ok(rows)
    }

    /// Every stored window prediction of session `id` over time.
    pub fn prediction_series(
        &self,
        id: &str,
    ) -> Result<Vec<sql::report::PredictionPoint>, StoreError> {
        sql::report::prediction_series(&self.conn, id)
    }

    /// The recorded start time of session `id`.
    pub fn start_time(&self, id: &str) -> Result<Option<String>, StoreError> {
        sql::report::start_time(&self.conn, id)
    }

    /// The utterances of session `id`, in order.
    pub fn utterances(&self, id: &str) -> Result<Vec<sql::report::UtteranceRow>, StoreError> {
        sql::report::utterances(&self.conn, id)
    }

    /// The survey answers of `participant`.
    pub fn surveys(&self, participant: &str) -> Result<Vec<sql::report::SurveyRow>, StoreError> {
        sql::report::surveys(&self.conn, participant)
    }

    /// A participant's recorded consent: `(consent, raw_media_consent)`, or `None` when
    /// the participant is unknown here.
    pub fn participant_consent(&self, id: &str) -> Result<Option<(String, bool)>, StoreError> {
        self.conn
            .query_row(
                "SELECT consent, raw_media_consent FROM participants WHERE id = ?1",
                [id],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? == 1)),
            )
            .optional()
            .map_err(sql("reading a participant's consent"))
    }

    /// The sessions of `participant`, oldest first.
    pub fn participant_sessions(&self, participant: &str) -> Result<Vec<String>, StoreError> {
        sql::report::participant_sessions(&self.conn, participant)
    }

    /// One session with its phases, stories, ratings and modalities.
    pub fn session_detail(&self, id: &str) -> Result<SessionDetail, StoreError> {
        let summary = self
            .conn
            .query_row(
                &format!("{SUMMARY_SELECT} WHERE id = ?1"),
                [id],
                summary_from_row,
            )
            .optional()
            .map_err(sql("reading a session"))?
            .ok_or_else(|| StoreError::NoSuchSession {
                id: id.to_string(),
                path: self.path.clone(),
            })?;
        let ctx = sql("reading a session");
        let phases = self
            .conn
            .prepare(
                "SELECT phase, start_ns, end_ns FROM phases WHERE session_id = ?1 ORDER BY seq",
            )
            .and_then(|mut s| {
                s.query_map([id], |r| {
                    Ok(PhaseRow {
                        phase: r.get(0)?,
                        start_secs: ns_to_secs(r.get(1)?),
                        end_secs: r.get::<_, Option<i64>>(2)?.map(ns_to_secs),
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(ctx)?;
        let count = |table: &str| -> Result<u64, StoreError> {
            self.conn
                .query_row(
                    &format!("SELECT count(*) FROM {table} WHERE session_id = ?1"),
                    [id],
                    |r| r.get::<_, i64>(0),
                )
                .map(|n| n.max(0) as u64)
                .map_err(sql("counting session rows"))
        };
        // A file older than version 8 (opened read-only, not migrated) has no shown words.
        let shown = if self.schema_version()? >= 8 {
            "coalesce(e.shown_title, s.title), e.shown_ns, r.value, e.shown_text IS NOT NULL"
        } else {
            "s.title, e.shown_ns, r.value, 0"
        };
        let stories = self
            .conn
            .prepare(&format!(
                "SELECT e.position, e.story_id, {shown}
                 FROM story_exposures e JOIN stories s ON s.id = e.story_id
                 LEFT JOIN self_ratings r ON r.session_id = e.session_id AND r.story_id = e.story_id
                 WHERE e.session_id = ?1 ORDER BY e.position"
            ))
            .and_then(|mut s| {
                s.query_map([id], |r| {
                    Ok(StoryExposureRow {
                        position: r.get(0)?,
                        story_id: r.get(1)?,
                        title: r.get(2)?,
                        shown_secs: ns_to_secs(r.get(3)?),
                        rating: r.get(4)?,
                        differs_from_bank: r.get(5)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading story exposures"))?;
        let modalities = self
            .conn
            .prepare(
                "SELECT m.name, m.stream, m.dims,
                   (SELECT count(*) FROM frame_features f
                    WHERE f.session_id = m.session_id AND f.modality = m.name AND f.present = 1)
                 FROM modalities m WHERE m.session_id = ?1 ORDER BY m.stream DESC, m.name",
            )
            .and_then(|mut s| {
                s.query_map([id], |r| {
                    Ok(ModalityRow {
                        name: r.get(0)?,
                        stream: r.get(1)?,
                        dims: r.get(2)?,
                        present_frames: get_u64(r, 3)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql("reading modalities"))?;
        Ok(SessionDetail {
            summary,
            phases,
            events: count("events")?,
            utterances: count("utterances")?,
            stories,
            modalities,
            predictions: self.session_predictions(id)?,
            synced_content: self.synced_content(id)?,
        })
    }

    /// The stored status of session `id`, if it is stored.
    pub fn session_status(&self, id: &str) -> Result<Option<String>, StoreError> {
        sql::session_rows::status(&self.conn, id)
    }

    /// In a central database, which optional tables session `id`'s record carried; `None`
    /// on a station's database (or one from before the table existed, read read-only).
    pub fn synced_content(
        &self,
        id: &str,
    ) -> Result<Option<crate::config::SyncContent>, StoreError> {
        let has_table: bool = self
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'session_sync'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(sql("reading what was synced"))?;
        if !has_table {
            return Ok(None);
        }
        let text: Option<String> = self
            .conn
            .query_row(
                "SELECT content FROM session_sync WHERE session_id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql("reading what was synced"))?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// The reads of `export windows` (see `sql::export`), on this store's connection.
    pub fn export_reads(&self) -> ExportReads<'_> {
        ExportReads(&self.conn)
    }

    /// Every story embedded with `model`: id, title, stored dims and embedding.
    pub fn story_embeddings(
        &self,
        model: &str,
    ) -> Result<Vec<sql::stories::StoredEmbedding>, StoreError> {
        sql::stories::embeddings(&self.conn, model)
    }

    /// What story retrieval for session `id` needs; `None` when there is no such session.
    pub fn retrieval_context(
        &self,
        id: &str,
        speaker: &str,
    ) -> Result<Option<sql::stories::RetrievalContext>, StoreError> {
        sql::stories::retrieval_context(&self.conn, id, speaker)
    }

    /// Every story `participant` was shown, in any session.
    pub fn stories_shown_to(&self, participant: &str) -> Result<Vec<String>, StoreError> {
        sql::stories::shown_to(&self.conn, participant)
    }

    /// The participant's latest session, if any.
    pub fn latest_session_of(&self, participant: &str) -> Result<Option<String>, StoreError> {
        sql::stories::latest_session_of(&self.conn, participant)
    }

    /// Every participant with consent, ratings and survey time points (the study page).
    pub fn study_participants(&self) -> Result<Vec<sql::study::ParticipantRow>, StoreError> {
        sql::study::participants(&self.conn)
    }

    /// Each session's start (recorded, else stored), by session id.
    pub fn session_starts(&self) -> Result<std::collections::BTreeMap<String, String>, StoreError> {
        sql::study::session_starts(&self.conn)
    }

    /// Predicted scores per phase and predictor, binned 1-5.
    pub fn prediction_bins(&self) -> Result<Vec<sql::study::ScoreBins>, StoreError> {
        sql::study::prediction_bins(&self.conn)
    }

    /// Self-ratings by value 1-5.
    pub fn rating_bins(&self) -> Result<[u64; 5], StoreError> {
        sql::study::rating_bins(&self.conn)
    }

    /// Every rated story's session-level prediction, by predictor (the study page's
    /// agreement).
    pub fn rated_stories(&self) -> Result<Vec<sql::study::RatedStory>, StoreError> {
        sql::study::rated_stories(&self.conn)
    }
}

const SUMMARY_SELECT: &str =
    "SELECT id, status, status_reason, station_id, participant_id, source, source_path,
        created_at, updated_at, frames, windows, duration_ns, quality_json FROM sessions";

fn summary_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionSummary> {
    let quality: Option<String> = r.get(12)?;
    Ok(SessionSummary {
        id: r.get(0)?,
        status: r.get(1)?,
        status_reason: r.get(2)?,
        station_id: r.get(3)?,
        participant_id: r.get(4)?,
        source: r.get(5)?,
        source_path: r.get(6)?,
        created_at: r.get(7)?,
        updated_at: r.get(8)?,
        frames: get_u64(r, 9)?,
        windows: get_u64(r, 10)?,
        duration_secs: ns_to_secs(r.get(11)?),
        quality: quality.and_then(|q| serde_json::from_str(&q).ok()),
    })
}

/// SQLite integers are i64; counts are never negative.
fn get_u64(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<u64> {
    Ok(r.get::<_, i64>(i)?.max(0) as u64)
}

fn ns_to_secs(ns: i64) -> f64 {
    ns as f64 / 1e9
}
