//! Modalities: what each one is ([`ModalitySpec`]) and which ones a run carries
//! ([`ModalityLayout`]), fixed at set-up.
//!
//! Contract: a [`ModalityLayout`] is built once, before any frame flows, by adding each
//! modality with its [`Stream`] and [`ModalitySpec`] (name, columns, producer, layout
//! version). Adding returns a [`ModalityId`]; stages, the aligner, the window assembler,
//! the window quality and the store find a modality by that id (or by name at set-up),
//! never by position arithmetic. Every frame record holds one entry per modality, in the
//! layout's order. Names are unique: a second modality with a name already present is
//! refused.

/// What computes a modality's vectors: a deterministic algorithm of this crate, or a learned
/// model run through ONNX Runtime (whose outputs differ in the last bits between CPU classes,
/// as its kernels do). Every spec says which, so nothing that compares stored values across
/// machines can forget a model modality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Computed {
    /// Rust arithmetic only: bit-identical on every x86-64 CPU.
    ByAlgorithm,
    /// At least one learned model's output (directly or through later arithmetic).
    ByModel,
}

/// A modality's name (as stored), the names of its vector's columns, what produces it and
/// the version of its column layout (bumped whenever a column's meaning changes).
#[derive(Debug, Clone, PartialEq)]
pub struct ModalitySpec {
    pub name: &'static str,
    pub columns: Vec<String>,
    /// The stage, or the model id, that computes the vectors.
    pub producer: String,
    pub layout_version: u32,
    /// Whether a learned model computes the vectors (not stored: it follows from the producer).
    pub computed: Computed,
}

impl ModalitySpec {
    /// A modality computed by this crate's own arithmetic.
    pub fn by_algorithm(
        name: &'static str,
        columns: Vec<String>,
        producer: impl Into<String>,
        layout_version: u32,
    ) -> Self {
        Self {
            name,
            columns,
            producer: producer.into(),
            layout_version,
            computed: Computed::ByAlgorithm,
        }
    }

    /// A modality computed (at least in part) by a learned model.
    pub fn by_model(
        name: &'static str,
        columns: Vec<String>,
        producer: impl Into<String>,
        layout_version: u32,
    ) -> Self {
        Self {
            computed: Computed::ByModel,
            ..Self::by_algorithm(name, columns, producer, layout_version)
        }
    }

    pub fn dims(&self) -> usize {
        self.columns.len()
    }
}

/// Where a modality comes from: computed per video frame slot (video, and text, which
/// follows the utterance events at the slot's time), or pooled from the audio stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Video,
    Text,
    Audio,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Video => "video",
            Stream::Text => "text",
            Stream::Audio => "audio",
        }
    }
}

/// A modality's place in the layout (and in every [`super::FrameRecord::features`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModalityId(usize);

impl ModalityId {
    /// The position in [`super::FrameRecord::features`].
    pub fn index(self) -> usize {
        self.0
    }
}

/// One modality of a layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Modality {
    pub stream: Stream,
    pub spec: ModalitySpec,
}

/// The modalities of a run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModalityLayout {
    modalities: Vec<Modality>,
}

/// A layout that cannot be built.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("modality `{0}` is in the layout twice")]
pub struct DuplicateModality(pub &'static str);

impl ModalityLayout {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a modality; its id is its place in every frame record.
    pub fn add(
        &mut self,
        stream: Stream,
        spec: ModalitySpec,
    ) -> Result<ModalityId, DuplicateModality> {
        if self.id(spec.name).is_some() {
            return Err(DuplicateModality(spec.name));
        }
        self.modalities.push(Modality { stream, spec });
        Ok(ModalityId(self.modalities.len() - 1))
    }

    /// The id of the modality called `name`.
    pub fn id(&self, name: &str) -> Option<ModalityId> {
        self.modalities
            .iter()
            .position(|m| m.spec.name == name)
            .map(ModalityId)
    }

    /// The modality `id` (ids come from this layout, so it exists).
    pub fn get(&self, id: ModalityId) -> &Modality {
        &self.modalities[id.0]
    }

    /// Every modality with its id, in layout order.
    pub fn iter(&self) -> impl Iterator<Item = (ModalityId, &Modality)> {
        self.modalities
            .iter()
            .enumerate()
            .map(|(i, m)| (ModalityId(i), m))
    }

    /// Ids of the modalities of `stream`.
    pub fn of_stream(&self, stream: Stream) -> Vec<ModalityId> {
        self.iter()
            .filter(|(_, m)| m.stream == stream)
            .map(|(id, _)| id)
            .collect()
    }

    pub fn len(&self) -> usize {
        self.modalities.len()
    }

    pub fn is_empty(&self) -> bool {
        self.modalities.is_empty()
    }

    /// A frame record's features with every modality absent.
    pub fn absent(&self) -> Vec<Option<Vec<f32>>> {
        vec![None; self.modalities.len()]
    }

    /// Checks a frame record's features against the layout: one entry per modality, each
    /// present vector of its modality's width with finite values. Returns the first
    /// mismatch.
    pub fn check(&self, features: &[Option<Vec<f32>>]) -> Result<(), String> {
        if features.len() != self.modalities.len() {
            return Err(format!(
                "{} modality entries for a layout of {}",
                features.len(),
                self.modalities.len()
            ));
        }
        for (m, v) in self.modalities.iter().zip(features) {
            if let Some(v) = v {
                if v.len() != m.spec.dims() {
                    return Err(format!(
                        "modality `{}` has {} values, its layout says {}",
                        m.spec.name,
                        v.len(),
                        m.spec.dims()
                    ));
                }
                // Stored values are finite or the modality is absent: NaN and infinity
                // would poison every mean and model downstream.
                if let Some(k) = v.iter().position(|x| !x.is_finite()) {
                    return Err(format!(
                        "modality `{}` has the non-finite value {} in column `{}`",
                        m.spec.name, v[k], m.spec.columns[k]
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &'static str, dims: usize) -> ModalitySpec {
        ModalitySpec::by_algorithm(
            name,
            (0..dims).map(|i| format!("c{i}")).collect(),
            "test",
            1,
        )
    }

    #[test]
    fn ids_follow_the_order_of_adding_and_names_are_unique() {
        let mut l = ModalityLayout::new();
        let a = l.add(Stream::Video, spec("a", 2)).unwrap();
        let b = l.add(Stream::Audio, spec("b", 1)).unwrap();
        assert_eq!((a.index(), b.index()), (0, 1));
        assert_eq!(l.id("b"), Some(b));
        assert_eq!(l.of_stream(Stream::Audio), vec![b]);
        assert_eq!(
            l.add(Stream::Text, spec("a", 3)),
            Err(DuplicateModality("a"))
        );
        assert!(l.check(&[Some(vec![0.0, 1.0]), None]).is_ok());
        assert!(l
            .check(&[Some(vec![0.0]), None])
            .unwrap_err()
            .contains("`a`"));
        assert!(l.check(&[None]).is_err());
    }
}
