//! `empathic extract audio`: ComParE-2016 or eGeMAPSv02 LLDs of a WAV file as CSV.
//!
//! Contract: the WAV is read at its own sample rate (openSMILE's values depend on the rate,
//! and this is how openSMILE reads a file), mixed to mono by averaging. The CSV has a header
//! `frameTime` then the set's names, comma-separated, one row per 10 ms frame, `frameTime` the
//! frame's start in seconds, every value in Rust's shortest round-trip float form (full
//! precision). The file is written beside the target and renamed into place at the end, so
//! a failure never leaves a partial CSV under the requested name.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use indicatif::ProgressBar;

use crate::capture::audio_file::WavAudioSource;
use crate::capture::{AudioSource, CaptureError};
use crate::core::LldSet;
use crate::exit::{Classify, ExitKind};
use crate::features::acoustic::LldExtractor;
use crate::features::AudioRow;

/// Errors of an extraction.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error(transparent)]
    Output(#[from] crate::files::OutputError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error("cannot write the CSV: {source}: {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Classify for ExtractError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            ExtractError::Capture(e) => e.exit_kind(),
            ExtractError::Output(e) => e.exit_kind(),
            ExtractError::Write { .. } => ExitKind::Runtime,
        }
    }
}

/// What an extraction produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtractSummary {
    pub rows: u64,
    pub sample_rate_hz: u32,
    pub input_channels: u16,
    pub duration_secs: f64,
}

/// Extracts the LLDs of `input` into `output`.
pub fn extract_audio_csv(
    input: &Path,
    output: &Path,
    set: LldSet,
    progress: &ProgressBar,
) -> Result<ExtractSummary, ExtractError> {
    crate::files::check_output(output).map_err(crate::files::OutputError::from)?;
    let rate = hound::WavReader::open(input)
        .map(|r| r.spec().sample_rate)
        .map_err(|e| CaptureError::Open {
            what: "audio",
            path: input.to_path_buf(),
            message: e.to_string(),
        })?;
    let mut source = WavAudioSource::open(input, rate, 100, 0)?;
    let info = source.info().clone();
    let mut stage = LldExtractor::new(set, rate);
    let write_err = |source: std::io::Error| ExtractError::Write {
        path: output.to_path_buf(),
        source,
    };
    let (partial, file) = crate::files::Partial::create(output)?;
    let mut w = BufWriter::new(file);
    let result = (|| -> Result<u64, ExtractError> {
        let mut header = String::from("frameTime");
        for name in set.columns() {
            header.push(',');
            header.push_str(&name);
        }
        writeln!(w, "{header}").map_err(write_err)?;
        let bar = progress;
        if let Some(n) = info.expected_samples {
            bar.set_length(n);
        }
        let mut rows = 0u64;
        let mut write_rows = |out: Vec<AudioRow>, w: &mut BufWriter<std::fs::File>| {
            for r in out {
                let mut line = format!("{}", r.t_ns as f64 / 1e9);
                for v in &r.values {
                    line.push(',');
                    line.push_str(&v.to_string());
                }
                writeln!(w, "{line}").map_err(write_err)?;
                rows += 1;
            }
            Ok::<(), ExtractError>(())
        };
        while let Some(block) = source.next_block()? {
            bar.inc(block.samples.len() as u64);
            write_rows(stage.push_samples(block.t_ns, &block.samples), &mut w)?;
        }
        write_rows(stage.finish_rows(), &mut w)?;
        bar.finish_and_clear();
        w.flush().map_err(write_err)?;
        Ok(rows)
    })();
    // On error the partial file goes with `partial` (dropped uncommitted).
    let rows = result?;
    partial.commit()?;
    Ok(ExtractSummary {
        rows,
        sample_rate_hz: rate,
        input_channels: info.input_channels,
        duration_secs: info.expected_samples.unwrap_or(0) as f64 / f64::from(rate),
    })
}
