//! What every section of the session page reads ([`Section`]), in a file of its own so the
//! session page and the signal sections (`signals.rs`) share it without importing each
//! other.

use super::frames::FrameSource;
use super::plots::Backdrop;
use super::PageOptions;
use crate::store::{ExportModality, SessionDetail, Store};

/// What every section of the session page reads: the stored session and what the page's
/// head derived from it once.
#[derive(Clone, Copy)]
pub(super) struct Section<'a> {
    pub(super) store: &'a Store,
    pub(super) id: &'a str,
    pub(super) d: &'a SessionDetail,
    pub(super) duration: f64,
    pub(super) phase_bands: &'a [(f64, f64, String, plotters::style::RGBColor)],
    pub(super) frame_source: &'a FrameSource<'a>,
    pub(super) utterances: &'a [crate::store::UtteranceRow],
    pub(super) quality: Option<&'a crate::report::QualityReport>,
    pub(super) opts: &'a PageOptions,
    pub(super) modalities: &'a [ExportModality],
}

impl Section<'_> {
    /// The phases shaded behind a time plot.
    pub(super) fn behind(&self) -> Backdrop<'_> {
        Backdrop {
            phases: self.phase_bands,
            markers: &[],
        }
    }
}
