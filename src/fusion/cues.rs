//! Cue groups: the parts of a modality a person understands, as the attributions name them.
//!
//! Contract: [`column_groups`] splits a modality's columns (by the names the layout gives
//! them) into named groups that together hold every column once, in a fixed order; a
//! modality this module does not know, or one whose columns match no rule, is one group
//! named after it. [`utterance_groups`] splits the `text` modality of one window by
//! utterance: the frames that carry the same sentence embedding (one utterance is embedded
//! once and repeated on each of its frames) form one group, in order of first appearance.
//! Nothing here reads feature values other than the text vectors' identity.
//!
//! Why these groups: they are the cues the study's staff and the robot can name ("smiling",
//! "speaking louder", "looking at the screen"), they follow the columns' published meaning
//! (OpenFace's AU numbering, openSMILE's ComParE-2016 descriptor families, MediaPipe's
//! blendshape and pose names), and there are few enough of them (at most seven a modality)
//! that an attribution over them can be computed on the station.

/// A named group of a modality's columns.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnGroup {
    pub cue: &'static str,
    pub columns: Vec<usize>,
}

/// One rule: the cue and whether a column belongs to it. Rules are tried in order; the
/// first that matches takes the column.
type Rule = (&'static str, fn(&str) -> bool);

fn au(name: &str, numbers: &[&str]) -> bool {
    numbers.iter().any(|n| name.starts_with(&format!("AU{n}_")))
}

fn landmark(name: &str) -> bool {
    ["x_", "y_", "z_", "X_", "Y_", "Z_"].iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|i| i.parse::<u32>().is_ok())
    })
}

const FACE: &[Rule] = &[
    ("head pose", |c| c.starts_with("pose_")),
    ("gaze", |c| c.starts_with("gaze_")),
    ("smile (AU06, AU12)", |c| au(c, &["06", "12"])),
    ("brows (AU01, AU02, AU04)", |c| au(c, &["01", "02", "04"])),
    ("other action units", |c| c.starts_with("AU")),
    ("face position and shape", |_| true),
];

const BLENDSHAPES: &[Rule] = &[
    ("smile", |c| {
        c.starts_with("mouthSmile") || c.starts_with("cheekSquint")
    }),
    ("brows and eyes", |c| {
        c.starts_with("brow") || c.starts_with("eye")
    }),
    ("mouth and jaw", |c| {
        c.starts_with("mouth") || c.starts_with("jaw")
    }),
    ("other expression", |_| true),
];

const ACOUSTIC: &[Rule] = &[
    ("loudness", |c| {
        let l = c.to_ascii_lowercase();
        l.starts_with("audspec_lengthl1norm")
            || l.starts_with("audspecrasta_lengthl1norm")
            || l.starts_with("pcm_rmsenergy")
            || l.starts_with("loudness")
    }),
    ("pitch", |c| c.starts_with("F0") || c.starts_with("voicing")),
    ("voice quality", |c| {
        let l = c.to_ascii_lowercase();
        l.starts_with("jitter") || l.starts_with("shimmer") || l.contains("hnr")
    }),
    ("spectral shape", |_| true),
];

const BODY: &[Rule] = &[("posture", landmark), ("in view", |_| true)];

/// The cue groups of modality `modality` with these `columns`, each column in exactly one
/// group, empty groups left out.
pub fn column_groups(modality: &str, columns: &[String]) -> Vec<ColumnGroup> {
    let rules: &[Rule] = match modality {
        "face" => FACE,
        "blendshapes" => BLENDSHAPES,
        "body" => BODY,
        m if m.starts_with("acoustic") => ACOUSTIC,
        _ => &[],
    };
    let mut groups: Vec<ColumnGroup> = rules
        .iter()
        .map(|(cue, _)| ColumnGroup {
            cue,
            columns: Vec::new(),
        })
        .collect();
    let mut whole = Vec::new();
    for (i, c) in columns.iter().enumerate() {
        match rules.iter().position(|(_, matches)| matches(c)) {
            Some(g) => groups[g].columns.push(i),
            None => whole.push(i),
        }
    }
    groups.retain(|g| !g.columns.is_empty());
    if !whole.is_empty() || groups.is_empty() {
        // Not reached for the known modalities (their last rule takes every column).
        groups.push(ColumnGroup {
            cue: "all of it",
            columns: whole,
        });
    }
    groups
}

/// One utterance of a window's `text` modality: the frames (window positions) that carry it.
#[derive(Debug, Clone, PartialEq)]
pub struct UtteranceGroup {
    pub frames: Vec<usize>,
}

/// The utterances of a window's text frames: `rows[i]` is frame i's vector, `None` where
/// the modality is absent. At most `max` groups: beyond it, the smallest groups (fewest
/// frames) are merged into their neighbour in time, so a long window of short utterances
/// still gets an attribution of bounded cost.
pub fn utterance_groups(rows: &[Option<&[f32]>], max: usize) -> Vec<UtteranceGroup> {
    let mut groups: Vec<(Vec<f32>, UtteranceGroup)> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let Some(v) = row else { continue };
        match groups.iter_mut().find(|(key, _)| key.as_slice() == *v) {
            Some((_, g)) => g.frames.push(i),
            None => groups.push((v.to_vec(), UtteranceGroup { frames: vec![i] })),
        }
    }
    let mut groups: Vec<UtteranceGroup> = groups.into_iter().map(|(_, g)| g).collect();
    while groups.len() > max.max(1) {
        let smallest = groups
            .iter()
            .enumerate()
            .min_by_key(|(_, g)| g.frames.len())
            .map_or(0, |(i, _)| i);
        let into = if smallest == 0 { 1 } else { smallest - 1 };
        let taken = groups.remove(smallest);
        let into = into.min(groups.len() - 1);
        groups[into].frames.extend(taken.frames);
        groups[into].frames.sort_unstable();
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[cfg(feature = "sensing")]
    #[test]
    fn every_column_of_the_face_is_in_exactly_one_named_group() {
        let cols = crate::features::face::face_columns();
        let groups = column_groups("face", &cols);
        let mut seen: Vec<usize> = groups.iter().flat_map(|g| g.columns.clone()).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..cols.len()).collect::<Vec<_>>());
        let smile = groups.iter().find(|g| g.cue.starts_with("smile")).unwrap();
        let smile_cols: Vec<&str> = smile.columns.iter().map(|&i| cols[i].as_str()).collect();
        assert!(smile_cols.contains(&"AU12_r") && smile_cols.contains(&"AU06_c"));
        assert!(!smile_cols.contains(&"AU01_r"));
        let pose = groups.iter().find(|g| g.cue == "head pose").unwrap();
        assert_eq!(pose.columns.len(), 6);
    }

    #[test]
    fn compare_descriptors_fall_into_the_four_families() {
        let cols = crate::features::acoustic::column_names();
        let groups = column_groups("acoustic_compare", &cols);
        let cues: Vec<&str> = groups.iter().map(|g| g.cue).collect();
        assert_eq!(
            cues,
            ["loudness", "pitch", "voice quality", "spectral shape"]
        );
        let loud: Vec<&str> = groups[0]
            .columns
            .iter()
            .map(|&i| cols[i].as_str())
            .collect();
        assert!(loud.contains(&"pcm_RMSenergy_sma"), "{loud:?}");
        assert_eq!(groups.iter().map(|g| g.columns.len()).sum::<usize>(), 65);
    }

    #[test]
    fn an_unknown_modality_is_one_group() {
        let g = column_groups("appearance", &names(&["f0", "f1"]));
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].columns, vec![0, 1]);
    }

    #[test]
    fn utterances_are_the_frames_of_one_vector_and_merge_beyond_the_cap() {
        let a = [1.0f32, 0.0];
        let b = [0.0f32, 1.0];
        let c = [0.5f32, 0.5];
        let rows = [
            None,
            Some(&a[..]),
            Some(&a[..]),
            Some(&b[..]),
            None,
            Some(&c[..]),
        ];
        let g = utterance_groups(&rows, 8);
        assert_eq!(
            g.iter().map(|g| g.frames.clone()).collect::<Vec<_>>(),
            vec![vec![1, 2], vec![3], vec![5]]
        );
        let merged = utterance_groups(&rows, 2);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged.iter().map(|g| g.frames.len()).sum::<usize>(), 4);
    }
}
