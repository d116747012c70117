//! `empathic transcribe SESSION_DIR|FILE.wav`: what was said, recognised on this machine
//! (`features::speech`), printed with its times.
//!
//! Contract: the audio (a session folder's `audio.wav`, or any PCM WAV) is read resampled to
//! 16 kHz mono; the utterances go to standard output as JSON lines (`start_ms`, `end_ms`, `speaker`,
//! `text`, `confidence`, `model`), SubRip (`srt`) or plain lines (`txt`), in milliseconds
//! from the audio's first sample; a progress bar goes to stderr. `--score` (a session
//! folder) also prints, on stderr, the word error rate against the participant's
//! utterances in its `events.jsonl`, under the scoring normalisation (`features::speech::score`,
//! printed by `empathic words`). In a session folder
//! each utterance says whose voice it is (`speaker`: `robot` when at least half of it overlaps
//! the robot's own utterances in `events.jsonl`, else `participant`); only the participant's
//! are scored.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::capture::audio_file::WavAudioSource;
use crate::capture::AudioSource;
use crate::cli::options::ConfigOption;
use crate::cli::{fail, load_config, progress_bar, Failure};
use crate::exit::ExitKind;
use crate::features::speech::stream::SpeechStream;
use crate::features::speech::{is_robot, word_errors, Recogniser, SpeechModels, Utterance};

/// Recognise speech on this machine (nothing leaves it): a session folder's audio or any
/// WAV, printed as JSON lines, SubRip or text.
#[derive(clap::Args)]
pub struct Args {
    /// A recorded-session folder (its audio.wav) or a PCM WAV file (any rate; mono, or
    /// stereo averaged).
    input: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "jsonl")]
    format: Format,
    /// With a session folder: print the word error rate against its events.jsonl's
    /// participant utterances on stderr.
    #[arg(long)]
    score: bool,
    /// Print the word error rate against this reference instead (any input): the text
    /// itself, or a file holding it (an existing path is read).
    #[arg(long, value_name = "TEXT|FILE", conflicts_with = "score")]
    reference: Option<String>,
    #[command(flatten)]
    config: ConfigOption,
}

/// The words a word error rate is counted on: each line of standard input (or FILE)
/// printed under the project's scoring normalisation (lower case, numbers spelled as read,
/// punctuation out; docs/features.md "Scoring words"), so every tool scores alike.
#[derive(clap::Args)]
pub struct WordsArgs {
    /// A text file (default: standard input).
    input: Option<PathBuf>,
}

impl WordsArgs {
    pub fn run(self) -> Result<ExitCode, Failure> {
        let text = match &self.input {
            Some(path) => std::fs::read_to_string(path).map_err(|e| {
                (
                    ExitKind::BadInput,
                    format!("cannot read {}: {e}", path.display()),
                )
            })?,
            None => std::io::read_to_string(std::io::stdin()).map_err(|e| {
                (
                    ExitKind::BadInput,
                    format!("cannot read standard input: {e}"),
                )
            })?,
        };
        for line in text.lines() {
            outln!(
                "{}",
                crate::features::speech::normalised_words(line).join(" ")
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    /// One JSON object a line: start_ms, end_ms, text, confidence, model, speaker.
    Jsonl,
    /// SubRip subtitles.
    Srt,
    /// One utterance a line, with its times.
    Txt,
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        let config = load_config(self.config.path())?;
        let session = self.input.is_dir();
        let wav = if session {
            self.input.join("audio.wav")
        } else {
            self.input.clone()
        };
        if self.score && !session {
            return Err((
                ExitKind::BadInput,
                format!(
                    "--score needs a session folder (its events.jsonl holds the reference): {}; give any other reference with --reference TEXT|FILE",
                    self.input.display()
                ),
            ));
        }
        // The reference is read before the audio is recognised: a missing one fails now,
        // not after minutes of recognition.
        let reference = match (&self.reference, self.score) {
            (Some(r), _) => Some((reference_text(r)?, describe_reference(r))),
            (None, true) => {
                let events = self.input.join("events.jsonl");
                if !events.is_file() {
                    return Err((
                        ExitKind::BadInput,
                        format!(
                            "--score: no events.jsonl in {} to take the participant's words from; give the reference with --reference TEXT|FILE",
                            self.input.display()
                        ),
                    ));
                }
                let text = participant_text(&events)?;
                if text.trim().is_empty() {
                    return Err((
                        ExitKind::BadInput,
                        format!(
                            "--score: {} holds no participant utterance to score against; give the reference with --reference TEXT|FILE",
                            events.display()
                        ),
                    ));
                }
                Some((
                    text,
                    format!("the participant's utterances of {}", events.display()),
                ))
            }
            (None, false) => None,
        };
        let mut source = WavAudioSource::open(&wav, 16_000, 1_000, 0).map_err(fail)?;
        let models = SpeechModels::in_dir(&config.models.dir);
        // The segment rules of `[asr]`, as the pipeline's recogniser uses them; the audio
        // streamed through it as the pipeline does (only the open utterance is held: two
        // hours of audio once held the whole file).
        let recogniser = Recogniser::open(&models, config.models.onnxruntime_library.as_deref())
            .map_err(fail)?
            .with_rules(crate::features::speech::stream::rules_of(&config.asr));
        let mut stream = SpeechStream::new(recogniser);
        let bar = progress_bar("samples");
        if let Some(n) = source.info().expected_samples {
            bar.set_length(n);
        }
        let heard = (|| -> Result<Vec<Utterance>, Failure> {
            let mut utterances = Vec::new();
            while let Some(block) = source.next_block().map_err(fail)? {
                bar.inc(block.samples.len() as u64);
                utterances.extend(
                    stream
                        .push(block.t_ns, &block.samples)
                        .map_err(fail)?
                        .utterances,
                );
            }
            utterances.extend(stream.finish().map_err(fail)?.utterances);
            Ok(utterances)
        })();
        bar.finish_and_clear();
        let utterances = heard?;
        // In a session, what overlaps the robot's own utterances is the robot's voice.
        let robot = if session {
            robot_spans(&self.input.join("events.jsonl"))?
        } else {
            Vec::new()
        };
        for (i, u) in utterances.iter().enumerate() {
            print_one(self.format, i, u, is_robot(u, &robot))?;
        }
        if let Some((reference, what)) = reference {
            let hypothesis: Vec<&str> = utterances
                .iter()
                .filter(|u| !is_robot(u, &robot))
                .map(|u| u.text.as_str())
                .collect();
            let (errors, words) = word_errors(&reference, &hypothesis.join(" "));
            eprintln!(
                "word error rate {:.1} % ({errors} errors in {words} reference words: {what})",
                100.0 * errors as f64 / words.max(1) as f64,
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

fn print_one(format: Format, i: usize, u: &Utterance, robot: bool) -> Result<(), Failure> {
    let speaker = if robot { "robot" } else { "participant" };
    match format {
        Format::Jsonl => {
            let mut v = serde_json::to_value(u).map_err(|e| (ExitKind::Runtime, e.to_string()))?;
            v["speaker"] = speaker.into();
            outln!("{v}");
        }
        Format::Srt => {
            let t = |ms: u64| {
                format!(
                    "{:02}:{:02}:{:02},{:03}",
                    ms / 3_600_000,
                    ms / 60_000 % 60,
                    ms / 1000 % 60,
                    ms % 1000
                )
            };
            outln!(
                "{}\n{} --> {}\n{}\n",
                i + 1,
                t(u.start_ms),
                t(u.end_ms),
                u.text
            );
        }
        Format::Txt => outln!(
            "[{:.2}-{:.2}]{} {}",
            u.start_ms as f64 / 1000.0,
            u.end_ms as f64 / 1000.0,
            if robot { " (robot)" } else { "" },
            u.text
        ),
    }
    Ok(())
}

/// The robot's utterance spans of a session's `events.jsonl` (none when it has no such file).
fn robot_spans(path: &Path) -> Result<Vec<(u64, u64)>, Failure> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        (
            ExitKind::BadInput,
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let events = crate::session::events::parse_events(&text, path).map_err(fail)?;
    Ok(events
        .into_iter()
        .filter_map(|e| match e.kind {
            crate::session::EventKind::Utterance {
                speaker,
                start_ms,
                end_ms,
                ..
            } if speaker == "robot" => Some((start_ms, end_ms)),
            _ => None,
        })
        .collect())
}

/// The participant's utterances of an `events.jsonl`, in order, joined.
/// `--reference`: the file's text when `r` names an existing file, else `r` itself.
fn reference_text(r: &str) -> Result<String, Failure> {
    let path = Path::new(r);
    let text = if path.is_file() {
        std::fs::read_to_string(path).map_err(|e| {
            (
                ExitKind::BadInput,
                format!("--reference: cannot read {}: {e}", path.display()),
            )
        })?
    } else {
        r.to_string()
    };
    if crate::features::speech::score::normalised_words(&text).is_empty() {
        return Err((
            ExitKind::BadInput,
            format!("--reference `{r}` has no word to score against"),
        ));
    }
    Ok(text)
}

fn describe_reference(r: &str) -> String {
    if Path::new(r).is_file() {
        format!("the reference text of {r}")
    } else {
        "the reference text given".into()
    }
}

fn participant_text(path: &Path) -> Result<String, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        (
            ExitKind::BadInput,
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let events = crate::session::events::parse_events(&text, path).map_err(fail)?;
    let words: Vec<String> = events
        .into_iter()
        .filter_map(|e| match e.kind {
            crate::session::EventKind::Utterance { speaker, text, .. }
                if speaker == "participant" =>
            {
                Some(text)
            }
            _ => None,
        })
        .collect();
    Ok(words.join(" "))
}
