//! `empathic export windows`: the stored windows as training data, in a format numpy reads
//! with nothing else installed (format `empathic-windows`, [`EXPORT_VERSION`]; specified in
//! docs/formats.md).
//!
//! Contract: `OUT/manifest.json` names the format and version and every exported session with its participant, frame count and modalities (dims,
//! producer, layout version, column names). Per session, `OUT/<session>/<modality>.npy`
//! is a float32 `[frames, dims]` array (zeros where absent) and `<modality>_mask.npy` a
//! uint8 `[frames]` presence mask; frames are stored once, not once per overlapping window
//! (eight times smaller at the default hop). `OUT/windows.jsonl` has one line per window:
//! session, participant, index, frame range `[start_frame, end_frame)`, time, phase, and
//! the stories shown before it ended with their self-ratings. Window `w` of modality `m`
//! is `np.load(f"{w.session}/{m}.npy")[w.start_frame:w.end_frame]`. Since version 3 the
//! stored window features come along too: `<modality>_window_mean.npy` float32
//! `[windows, dims]` (the mean over the window's present frames, zeros when none) and
//! `<modality>_window_present.npy` uint16 `[windows]` (present frames), row = the
//! window's `window_index`. A central database holds window features but per-frame
//! features only when a study syncs them: a session without them has `frames: 0` and
//! no per-frame arrays. The story bank comes
//! along (version 2), as training needs each story's embedding E(S): per sentence encoder
//! `e`, `OUT/stories/<e>.npy` float32 `[stories, dims]` and `OUT/stories/<e>.jsonl`, the
//! story of each row (`story_id`, `title`) in row order. A database that holds the stories'
//! text but not their embeddings (a central database: records carry the stories shown, not
//! vectors) has them embedded at export with the configured sentence encoder, from the same
//! presented text the bank's import embeds, so an export from a station and one from a
//! central database both train. Since version 4 each session says whose utterances fed its text
//! modality (`text_source`: `dialogue_app` or `asr`, the station's recogniser). Since version 5
//! `<session>/attributions.jsonl` says what moved each prediction (docs/prediction.md, "Why a
//! prediction"), when the store holds attributions. Only complete sessions are exported. The folder must be new or empty; nothing is written outside it.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ndarray::{Array1, Array2};
use ndarray_npy::WriteNpyExt;
use serde::Serialize;

use super::{db_path, fail, load_config, open_existing_store, progress_bar, Failure};
use crate::exit::ExitKind;
use crate::store::ExportModality;
use crate::store::Store;

/// What embeds stories for an export: the sentence encoder; in the collector build (no
/// `sensing`, no ONNX Runtime) no value of it exists, so such an export never embeds.
#[cfg(feature = "sensing")]
pub type StoryEncoder = crate::features::text::SentenceEncoder;
/// What embeds stories for an export: none in the collector build (no ONNX Runtime).
#[cfg(not(feature = "sensing"))]
pub enum StoryEncoder {}

#[cfg(not(feature = "sensing"))]
impl StoryEncoder {
    fn embed(&mut self, _texts: &[&str]) -> Result<Vec<Vec<f32>>, std::convert::Infallible> {
        match *self {}
    }
}

/// Export stored data.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Every window's per-frame features and masks per modality, with session, participant,
    /// phase, time and the stories in play with their ratings (numpy .npy + JSON lines).
    Windows {
        #[command(flatten)]
        db: super::options::DbOption,
        #[command(flatten)]
        config: super::options::ConfigOption,
        /// A new or empty folder.
        #[arg(long)]
        out: PathBuf,
        /// Only windows of this phase.
        #[arg(long)]
        phase: Option<String>,
        /// Only this session.
        #[arg(long)]
        session: Option<String>,
    },
    /// One session as CSV files that pandas and spreadsheets read as they are:
    /// utterances, window predictions, events, and per modality its per-frame features
    /// (`frame,timestamp,success,` then the modality's columns, as OpenFace's CSV; absent
    /// frames have success 0 and empty values). docs/formats.md, "Session CSV export".
    Session {
        /// The session's id.
        id: String,
        #[command(flatten)]
        db: super::options::DbOption,
        #[command(flatten)]
        config: super::options::ConfigOption,
        /// A new or empty folder.
        #[arg(long)]
        out: PathBuf,
    },
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self.command {
            Command::Windows {
                db,
                config,
                out,
                phase,
                session,
            } => export_command(
                db.db,
                config.path(),
                &out,
                phase.as_deref(),
                session.as_deref(),
            ),
            Command::Session {
                id,
                db,
                config,
                out,
            } => {
                let config = super::load_config(config.path())?;
                let store = super::open_existing_store(&super::db_path(db.db, &config))?;
                let written = super::export_session::export_session(&store, &id, &out)?;
                outln!(
                    "exported session {id} into {}: {}",
                    out.display(),
                    written
                        .iter()
                        .map(|(f, rows)| format!("{f} ({rows} rows)"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

/// Format version of the export.
pub const EXPORT_VERSION: u32 = 5;

#[derive(Serialize)]
struct SessionEntry {
    session_id: String,
    participant_id: Option<String>,
    /// Whose utterances fed the text modality: `dialogue_app` or `asr` (the station's
    /// recogniser). Since version 4.
    text_source: String,
    frames: u64,
    windows: usize,
    modalities: Vec<ExportModality>,
}

#[derive(Serialize)]
struct Manifest {
    format: &'static str,
    version: u32,
    phase: Option<String>,
    sessions: Vec<SessionEntry>,
    /// Sentence encoders with a `stories/<encoder>.npy` file.
    story_encoders: Vec<String>,
}

#[derive(Serialize)]
struct WindowLine<'a> {
    session_id: &'a str,
    participant_id: Option<&'a str>,
    #[serde(flatten)]
    window: &'a crate::store::ExportWindow,
}

/// What was exported.
pub struct Exported {
    pub sessions: usize,
    pub windows: usize,
    pub bytes: u64,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| {
        (
            ExitKind::Runtime,
            format!("cannot write {}: {e}", path.display()),
        )
    }
}

/// Exports the windows of `store` into `out`.
pub fn export_windows(
    store: &Store,
    out: &Path,
    phase: Option<&str>,
    session: Option<&str>,
    encoder: Option<(&str, &mut StoryEncoder)>,
    progress: &indicatif::ProgressBar,
) -> Result<Exported, Failure> {
    if out.exists()
        && std::fs::read_dir(out)
            .map_err(io_err(out))?
            .next()
            .is_some()
    {
        return Err((
            ExitKind::BadInput,
            format!(
                "{} is not empty: export into a new or empty folder",
                out.display()
            ),
        ));
    }
    let reads = store.export_reads();
    let sessions = reads.sessions(session).map_err(fail)?;
    if sessions.is_empty() {
        return Err((
            ExitKind::BadInput,
            match session {
                Some(id) => format!("no complete session `{id}` in {}", store.path().display()),
                None => format!("no complete session in {}", store.path().display()),
            },
        ));
    }
    // Each session id names a folder under `out`: checked by the one id rule before
    // anything is written, so none escapes it (a stored `..` once wrote into its parent).
    for (id, ..) in &sessions {
        crate::session::manifest::check_id("session id", id).map_err(|e| {
            (
                ExitKind::BadInput,
                format!("{}: {e}; nothing was exported", store.path().display()),
            )
        })?;
    }
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    progress.set_length(sessions.len() as u64);
    let lines_path = out.join("windows.jsonl");
    let mut lines =
        BufWriter::new(crate::files::create_new(&lines_path).map_err(io_err(&lines_path))?);
    let mut entries = Vec::new();
    let mut total_windows = 0;
    let mut bytes = 0u64;
    for (id, participant, text_source) in &sessions {
        let modalities = reads.modalities(id).map_err(fail)?;
        let frames = reads.frame_count(id).map_err(fail)?;
        let windows = reads.windows(id, phase).map_err(fail)?;
        let dir = out.join(id);
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let all_windows = reads.windows(id, None).map_err(fail)?;
        let rows = all_windows
            .iter()
            .map(|w| w.window_index as usize + 1)
            .max()
            .unwrap_or(0);
        for m in &modalities {
            let mut means = Array2::<f32>::zeros((rows, m.dims));
            let mut present = Array1::<u16>::zeros(rows);
            reads
                .window_means(id, &m.name, |w, n, mean| {
                    let w = w as usize;
                    if w < rows {
                        present[w] = n.min(u64::from(u16::MAX)) as u16;
                        if let Some(v) = mean.filter(|v| v.len() == m.dims) {
                            means
                                .row_mut(w)
                                .iter_mut()
                                .zip(&v)
                                .for_each(|(d, s)| *d = *s);
                        }
                    }
                })
                .map_err(fail)?;
            for (name, write) in [
                (
                    format!("{}_window_mean.npy", m.name),
                    &means as &dyn WriteNpy,
                ),
                (
                    format!("{}_window_present.npy", m.name),
                    &present as &dyn WriteNpy,
                ),
            ] {
                bytes += write_npy(&dir.join(name), write)?;
            }
            if frames == 0 {
                continue;
            }
            let mut values = Array2::<f32>::zeros((frames as usize, m.dims));
            let mut mask = Array1::<u8>::zeros(frames as usize);
            let mut bad = None;
            reads
                .frame_vectors(id, &m.name, |i, v| {
                    let i = i as usize;
                    if i < frames as usize && v.len() == m.dims {
                        values
                            .row_mut(i)
                            .iter_mut()
                            .zip(&v)
                            .for_each(|(d, s)| *d = *s);
                        mask[i] = 1;
                    } else {
                        bad = Some(i);
                    }
                })
                .map_err(fail)?;
            if let Some(i) = bad {
                return Err((
                    ExitKind::Runtime,
                    format!(
                        "session {id}: modality {} frame {i} does not fit its layout",
                        m.name
                    ),
                ));
            }
            for (name, write) in [
                (format!("{}.npy", m.name), &values as &dyn WriteNpy),
                (format!("{}_mask.npy", m.name), &mask as &dyn WriteNpy),
            ] {
                bytes += write_npy(&dir.join(name), write)?;
            }
        }
        for w in &windows {
            let line = serde_json::to_string(&WindowLine {
                session_id: id,
                participant_id: participant.as_deref(),
                window: w,
            })
            .map_err(|e| (ExitKind::Runtime, format!("cannot encode a window: {e}")))?;
            writeln!(lines, "{line}").map_err(io_err(&lines_path))?;
        }
        // What moved each prediction (version 5), for the toolkit: one line per window,
        // predictor and story.
        let why = store.session_attributions(id).map_err(fail)?;
        if !why.is_empty() {
            let path = dir.join("attributions.jsonl");
            let mut file = BufWriter::new(crate::files::create_new(&path).map_err(io_err(&path))?);
            for a in &why {
                let line = serde_json::json!({
                    "window_index": a.window_index,
                    "predictor": a.predictor,
                    "story_id": a.story_id,
                    "in_play": if a.retrieved { "retrieved" } else { "shown" },
                    "score": a.score,
                    "baseline": a.attribution.baseline,
                    "method": a.attribution.method,
                    "cues": a.attribution.cues,
                });
                writeln!(file, "{line}").map_err(io_err(&path))?;
            }
            file.flush().map_err(io_err(&path))?;
        }
        total_windows += windows.len();
        entries.push(SessionEntry {
            session_id: id.clone(),
            participant_id: participant.clone(),
            text_source: text_source.clone(),
            frames,
            windows: windows.len(),
            modalities,
        });
        progress.inc(1);
    }
    lines.flush().map_err(io_err(&lines_path))?;
    let mut story_encoders = reads.story_encoders().map_err(fail)?;
    let stories_dir = out.join("stories");
    if !story_encoders.is_empty() {
        std::fs::create_dir_all(&stories_dir).map_err(io_err(&stories_dir))?;
        for encoder in &story_encoders {
            let stories = reads.story_embeddings(encoder).map_err(fail)?;
            bytes += write_story_bank(&stories, encoder, &stories_dir)?;
        }
    }
    if let Some((name, encoder)) = encoder.filter(|(n, _)| !story_encoders.iter().any(|e| e == n)) {
        let stories = reads.stories().map_err(fail)?;
        if !stories.is_empty() {
            let mut embedded = Vec::with_capacity(stories.len());
            for (story_id, title, text) in stories {
                let input = crate::stories::presented_text(&title, &text);
                let vec = encoder
                    .embed(&[input.as_str()])
                    .map_err(|e| {
                        (
                            ExitKind::Runtime,
                            format!("cannot embed story {story_id}: {e}"),
                        )
                    })?
                    .remove(0);
                embedded.push(crate::store::StoredEmbedding {
                    story_id,
                    title,
                    dims: vec.len(),
                    vec,
                });
            }
            std::fs::create_dir_all(&stories_dir).map_err(io_err(&stories_dir))?;
            bytes += write_story_bank(&embedded, name, &stories_dir)?;
            story_encoders.push(name.to_string());
        }
    }
    let manifest_path: PathBuf = out.join("manifest.json");
    let manifest = Manifest {
        format: "empathic-windows",
        version: EXPORT_VERSION,
        phase: phase.map(str::to_string),
        sessions: entries,
        story_encoders,
    };
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| {
        (
            ExitKind::Runtime,
            format!("cannot encode the manifest: {e}"),
        )
    })?;
    crate::files::create_new(&manifest_path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(io_err(&manifest_path))?;
    Ok(Exported {
        sessions: sessions.len(),
        windows: total_windows,
        bytes,
    })
}

/// Writes one array; returns the bytes written.
fn write_npy(path: &Path, write: &dyn WriteNpy) -> Result<u64, Failure> {
    let file = crate::files::create_new(path).map_err(io_err(path))?;
    write.write_to(BufWriter::new(file)).map_err(|e| {
        (
            ExitKind::Runtime,
            format!("cannot write {}: {e}", path.display()),
        )
    })?;
    Ok(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
}

/// Writes `stories/<encoder>.npy` and `.jsonl`; returns the bytes written.
fn write_story_bank(
    stories: &[crate::store::StoredEmbedding],
    encoder: &str,
    dir: &Path,
) -> Result<u64, Failure> {
    let dims = stories.first().map_or(0, |s| s.dims);
    if let Some(bad) = stories
        .iter()
        .find(|s| s.dims != dims || s.vec.len() != dims)
    {
        return Err((
            ExitKind::Runtime,
            format!(
                "story {} embedded with {encoder}: {} values where the bank has {dims}",
                bad.story_id,
                bad.vec.len()
            ),
        ));
    }
    let mut matrix = Array2::<f32>::zeros((stories.len(), dims));
    let lines_path = dir.join(format!("{encoder}.jsonl"));
    let mut lines =
        BufWriter::new(crate::files::create_new(&lines_path).map_err(io_err(&lines_path))?);
    for (i, s) in stories.iter().enumerate() {
        matrix
            .row_mut(i)
            .iter_mut()
            .zip(&s.vec)
            .for_each(|(d, v)| *d = *v);
        let line = serde_json::json!({ "story_id": s.story_id, "title": s.title });
        writeln!(lines, "{line}").map_err(io_err(&lines_path))?;
    }
    lines.flush().map_err(io_err(&lines_path))?;
    let npy_path = dir.join(format!("{encoder}.npy"));
    let file = crate::files::create_new(&npy_path).map_err(io_err(&npy_path))?;
    matrix.write_to(BufWriter::new(file)).map_err(|e| {
        (
            ExitKind::Runtime,
            format!("cannot write {}: {e}", npy_path.display()),
        )
    })?;
    Ok([&lines_path, &npy_path]
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum())
}

/// An array that can be written as `.npy` (both element types behind one reference).
trait WriteNpy {
    fn write_to(&self, w: BufWriter<std::fs::File>) -> Result<(), ndarray_npy::WriteNpyError>;
}

impl WriteNpy for Array2<f32> {
    fn write_to(&self, w: BufWriter<std::fs::File>) -> Result<(), ndarray_npy::WriteNpyError> {
        self.write_npy(w)
    }
}

impl WriteNpy for Array1<u8> {
    fn write_to(&self, w: BufWriter<std::fs::File>) -> Result<(), ndarray_npy::WriteNpyError> {
        self.write_npy(w)
    }
}

impl WriteNpy for Array1<u16> {
    fn write_to(&self, w: BufWriter<std::fs::File>) -> Result<(), ndarray_npy::WriteNpyError> {
        self.write_npy(w)
    }
}

/// The encoder that embeds a bank stored without embeddings (a central database).
#[cfg(feature = "sensing")]
fn story_encoder(
    config: &crate::config::Config,
    model: &str,
    _store: &Store,
) -> Result<Option<StoryEncoder>, Failure> {
    Ok(Some(
        super::ModelFiles::open(config)?.sentence_encoder(model)?,
    ))
}

/// The collector build has no sentence encoder: the export goes without `stories/` and says
/// how to get them.
#[cfg(not(feature = "sensing"))]
fn story_encoder(
    _config: &crate::config::Config,
    model: &str,
    store: &Store,
) -> Result<Option<StoryEncoder>, Failure> {
    if store.export_reads().stories().map_err(fail)?.is_empty() {
        return Ok(None);
    }
    tracing::warn!(
        "the stories are not embedded with {model} in this database and this build cannot embed them \
         (the collector build has no ONNX Runtime): the export has no stories/ folder; \
         export with the full empathic build to include them"
    );
    Ok(None)
}

/// `empathic export windows` as the command runs it: the store opened, stories embedded
/// when the database holds none, a progress bar, the summary line.
fn export_command(
    db: Option<PathBuf>,
    config: Option<&Path>,
    out: &Path,
    phase: Option<&str>,
    session: Option<&str>,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    // Stories without embeddings (a central database) are embedded with the configured
    // encoder; opened only when needed, so an export needs no models otherwise.
    let model = config.models.sentence_encoder.clone();
    let has_embeddings = store
        .export_reads()
        .story_encoders()
        .map_err(fail)?
        .contains(&model);
    let mut encoder = if has_embeddings {
        None
    } else {
        story_encoder(&config, &model, &store)?
    };
    let progress = progress_bar("sessions");
    let result = export_windows(
        &store,
        out,
        phase,
        session,
        encoder.as_mut().map(|e| (model.as_str(), e)),
        &progress,
    );
    progress.finish_and_clear();
    let e = result?;
    outln!(
        "exported {} windows of {} session(s) to {} ({:.1} MB; format empathic-windows v{})",
        e.windows,
        e.sessions,
        out.display(),
        e.bytes as f64 / 1e6,
        EXPORT_VERSION
    );
    Ok(ExitCode::SUCCESS)
}
