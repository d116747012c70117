//! The window consumers: what receives every emitted window on its own thread (the store's
//! `StoreWindows`, the fusion stage's `PredictWindows`, and any a caller adds).

use super::observe::{Observer, Topic};
use super::FUSION_BATCH;
use crate::clock::Speed;
use crate::core::{ModalityLayout, QualitySources, Window};
use crate::runtime::RunError;
use crate::store::rows::WindowRow;
use crate::store::StoreWriter;
use std::sync::Arc;

/// A consumer of every emitted window, on its own thread behind a bounded queue (the store
/// and the fusion stage are two).
///
/// Windows come in emission order; `finish` is called once after the last one (end of
/// stream or stop), so a consumer that holds windows back can flush them.
pub trait WindowConsumer: Send {
    /// The thread's name, e.g. `store-windows`.
    fn thread_name(&self) -> String;
    fn consume(&mut self, window: &Window) -> Result<(), RunError>;
    fn finish(&mut self) -> Result<(), RunError> {
        Ok(())
    }
}

/// The fusion stage as a window consumer (`fusion-windows`): predictions for every window
/// go to the store writer.
///
/// Batching: at `--speed max` windows are predicted in blocks of `FUSION_BATCH`
/// consecutive windows (one model call per predictor and block; the last block may be
/// shorter), paced runs one window at a time (no added latency). Blocks are fixed by window
/// order, not by timing, so two runs at one speed store identical predictions: ONNX
/// Runtime's result for a window can differ in the last bits with the batch it is in
/// (measured below 1e-6), so batching by what happens to be queued would not.
pub struct PredictWindows {
    stage: crate::fusion::FusionStage,
    writer: StoreWriter,
    block: usize,
    held: Vec<Window>,
    /// Told each window's predictions (`prediction` messages).
    observer: Option<Arc<dyn Observer>>,
    /// Where the latest window's representation is kept (the live `recommend`).
    latest: Option<LatestSlot>,
}

/// The latest window a predictor represented, shared with whoever scores stories against it.
pub type LatestSlot = Arc<std::sync::Mutex<Option<crate::fusion::LatestRepresentation>>>;

impl PredictWindows {
    pub fn new(stage: crate::fusion::FusionStage, writer: StoreWriter, speed: Speed) -> Self {
        let block = match speed {
            Speed::Max => FUSION_BATCH,
            Speed::Realtime => 1,
        };
        Self {
            stage,
            writer,
            block,
            held: Vec::with_capacity(block),
            observer: None,
            latest: None,
        }
    }

    /// Keeps the latest window's representation in `slot` after each batch.
    pub fn with_latest(mut self, slot: Option<LatestSlot>) -> Self {
        self.latest = slot;
        self
    }

    /// Tells `observer` each window's predictions as they are made.
    pub fn with_observer(mut self, observer: Option<Arc<dyn Observer>>) -> Self {
        self.observer = observer;
        self
    }

    fn flush(&mut self) -> Result<(), RunError> {
        if self.held.is_empty() {
            return Ok(());
        }
        let refs: Vec<&Window> = self.held.iter().collect();
        let predictions = self.stage.predict_batch(&refs);
        if let (Some(slot), Some(l)) = (&self.latest, self.stage.latest()) {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(l);
        }
        if let Some(o) = &self.observer {
            for w in &refs {
                let of_window: Vec<serde_json::Value> = predictions
                    .iter()
                    .filter(|p| p.window_index == w.index)
                    .map(|p| {
                        serde_json::json!({
                            "predictor": p.predictor,
                            "story_id": p.story_id,
                            "in_play": if p.retrieved { "retrieved" } else { "shown" },
                            "raw_cosine": p.raw_cosine,
                            "score": p.score,
                            "calibration": p.calibration,
                            "synthetic": p.synthetic,
                            // What moved it most: the robot can say why.
                            "why": p.attribution.as_ref().map(|a| serde_json::json!({
                                "baseline": a.baseline,
                                "top": crate::report::why::top_cues(a, 3),
                            })),
                        })
                    })
                    .collect();
                if !of_window.is_empty() {
                    o.observe(
                        Topic::Prediction,
                        w.end_ns / 1_000_000,
                        serde_json::json!({
                            "window_index": w.index,
                            "start_ms": w.start_ns / 1_000_000,
                            "end_ms": w.end_ns / 1_000_000,
                            "phase": w.phase.map(|p| p.as_str()),
                            "predictions": of_window,
                        }),
                    );
                }
            }
        }
        tracing::trace!(
            windows = refs.len(),
            predictions = predictions.len(),
            "windows predicted"
        );
        self.held.clear();
        Ok(self.writer.predictions(predictions)?)
    }
}

impl WindowConsumer for PredictWindows {
    fn thread_name(&self) -> String {
        "fusion-windows".into()
    }

    fn consume(&mut self, window: &Window) -> Result<(), RunError> {
        // A window is cheap to clone: its frames and stories are shared.
        self.held.push(window.clone());
        if self.held.len() >= self.block {
            self.flush()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), RunError> {
        self.flush()
    }
}

/// The store as a window consumer: each window's stored form, through the writer.
pub struct StoreWindows {
    writer: StoreWriter,
    layout: ModalityLayout,
    sources: QualitySources,
}

impl StoreWindows {
    pub fn new(writer: StoreWriter, layout: &ModalityLayout) -> Self {
        Self {
            writer,
            layout: layout.clone(),
            sources: QualitySources::new(layout),
        }
    }
}

impl WindowConsumer for StoreWindows {
    fn thread_name(&self) -> String {
        "store-windows".into()
    }

    fn consume(&mut self, window: &Window) -> Result<(), RunError> {
        self.writer
            .window(WindowRow::from_window(window, &self.layout, &self.sources))?;
        Ok(())
    }
}
