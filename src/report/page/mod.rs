//! The session report and the participant view: one self-contained HTML page each.
//!
//! Contract: [`session_page`] and [`participant_page`] read a store (never write it) and
//! return a complete HTML document: inline CSS, plots as inline SVG (`report::plots`), no
//! script, no external reference of any kind (no `http://` or `https://` appears in it),
//! readable printed to A4 and on a phone. Raw video never appears (only numbers derived
//! from it); the participant's words appear only when [`PageOptions::transcript`] is set.
//! Every section is present on every page; a section without data says what is missing
//! (a failed session, a modality not stored, no predictions) instead of disappearing.
//! Section headings are fixed ([`SESSION_SECTIONS`], [`PARTICIPANT_SECTIONS`]) so staff
//! and tests can find them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

pub use super::plots::esc;
use super::plots::{self, Backdrop, Lane, Marker, Series, PALETTE};
use super::verdict::{self, Verdict};
use crate::store::ExportModality;
use crate::store::{SessionDetail, Store, StoreError};

mod frames;
mod participant;
mod section;
mod session;
mod signals;
mod summary;
mod why;

pub use participant::participant_page;
pub use session::session_page;

/// The section headings of a session page, in order.
pub const SESSION_SECTIONS: [&str; 9] = [
    "At a glance",
    "Session",
    "Timeline",
    "Predicted empathy",
    "Facial behaviour and posture",
    "Voice",
    "Data quality",
    "Transcript",
    "Appendix: what produced these figures",
];

/// The section headings of a participant page, in order.
pub const PARTICIPANT_SECTIONS: [&str; 5] = [
    "Participant",
    "Ratings per session",
    "Predictions against ratings",
    "Surveys",
    "Data quality per session",
];

/// What a page may show.
#[derive(Debug, Clone, Default)]
pub struct PageOptions {
    /// Include the participant's utterances verbatim.
    pub transcript: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Plot(String),
    #[error("no participant `{id}` in {path}")]
    NoSuchParticipant {
        id: String,
        path: std::path::PathBuf,
    },
}

const CSS: &str = "
body{font-family:sans-serif;margin:0 auto;max-width:960px;padding:12px;color:#222;line-height:1.4}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;border-bottom:2px solid #0072b2;margin-top:1.6em}
h3{font-size:1em;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.4em 0;font-size:.92em;max-width:100%}td,th{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}
.scroll{overflow-x:auto}.hash{font-family:monospace;font-size:.85em;word-break:break-all}
.legend{font-size:.88em;margin:.1em 0 .8em}.key{white-space:nowrap;margin-right:1em}
.scale{display:inline-block;width:160px;height:.9em;border:1px solid #999;vertical-align:middle}.swatch{display:inline-block;width:1em;height:.9em;border:1px solid #999;vertical-align:middle}
.glance{border:1px solid #ccc;background:#fafafa;padding:4px 10px}
th{background:#f2f2f2}svg{max-width:100%;height:auto;display:block}.plot{overflow-x:auto}.plot svg{min-width:720px}
.good{background:#d8f0d8}.check{background:#fff0c0}.bad{background:#f8d0d0}
.note{color:#555;font-size:.92em}.banner{padding:8px;border:2px solid #d55e00;background:#fde8dc;margin:.6em 0}
.synthetic{color:#a03000;font-weight:bold}
@media print{body{max-width:none}h2{break-after:avoid}svg{break-inside:avoid}}
";

fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{CSS}</style></head><body>\n",
        esc(title)
    )
}

fn section(out: &mut String, title: &str) {
    let id = title.to_lowercase().replace(' ', "-");
    let _ = writeln!(out, "<h2 id=\"{id}\">{}</h2>", esc(title));
}

fn note(out: &mut String, text: &str) {
    let _ = writeln!(out, "<p class=\"note\">{}</p>", esc(text));
}

/// A plot, in a frame that scrolls sideways on a narrow screen rather than shrinking its
/// text below legibility (a 900-unit-wide chart keeps at least 720 px: 11-unit labels stay
/// about 9 px on a 420 px phone).
fn plot(out: &mut String, svg: Result<String, String>) -> Result<(), PageError> {
    out.push_str("<div class=\"plot\">");
    out.push_str(&svg.map_err(PageError::Plot)?);
    out.push_str("</div>\n");
    Ok(())
}

fn phase_color(i: usize) -> plotters::style::RGBColor {
    PALETTE[i % PALETTE.len()]
}
