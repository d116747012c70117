//! The plots' text and data, apart from drawing: HTML escaping, session times as mm:ss,
//! series thinned to what a chart can show (gaps kept as gaps), and story markers joined
//! when their labels would overlap. Pure functions; `plots.rs` draws with them.

/// The charts' width in SVG units (they scale to the page).
pub(crate) const WIDTH: u32 = 900;

/// HTML-escapes text (the page's and the legends'); control characters (a NUL or an escape
/// in an utterance, which HTML cannot carry) become U+FFFD, tabs and newlines stay.
pub fn esc(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect::<String>()
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Session seconds as `mm:ss` (or `h:mm:ss` past an hour).
pub fn mmss(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60)
    } else {
        format!("{:02}:{:02}", s / 60, s % 60)
    }
}

/// Bucket means over `[0, duration)` in at most `max` buckets; a bucket without a point
/// stays empty (`None`), so gaps stay gaps.
pub fn downsample(points: &[(f64, f64)], duration: f64, max: usize) -> Vec<(f64, Option<f64>)> {
    if points.len() <= max || duration <= 0.0 {
        return points.iter().map(|(t, v)| (*t, Some(*v))).collect();
    }
    let width = duration / max as f64;
    let mut sums = vec![(0.0, 0usize); max];
    for (t, v) in points {
        let i = ((t / width) as usize).min(max - 1);
        sums[i].0 += v;
        sums[i].1 += 1;
    }
    sums.iter()
        .enumerate()
        .map(|(i, (s, n))| ((i as f64 + 0.5) * width, (*n > 0).then(|| s / *n as f64)))
        .collect()
}

/// `points` (time-sorted) with a NaN gap wherever two neighbours are further apart than
/// `max_step` seconds, so a line never joins samples that are not contiguous (windows of a
/// story retrieved twice, minutes apart).
pub fn with_gaps(points: &[(f64, f64)], max_step: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len());
    for (i, &p) in points.iter().enumerate() {
        if i > 0 && p.0 - points[i - 1].0 > max_step {
            out.push(((p.0 + points[i - 1].0) / 2.0, f64::NAN));
        }
        out.push(p);
    }
    out
}

/// A vertical marker (a story shown, say).
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    pub secs: f64,
    pub label: String,
}

/// Markers whose labels would overlap on an axis of `x_max` seconds (drawn 900 units wide,
/// about 6.5 units a character at 11 units) joined into one, at the first one's time: two
/// stories shown within 2 s of each other were drawn one over the other.
pub fn unclutter(markers: &[Marker], x_max: f64) -> Vec<Marker> {
    let per_char = x_max.max(1.0) * 6.5 / f64::from(WIDTH);
    let mut sorted: Vec<Marker> = markers.to_vec();
    sorted.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    let mut out: Vec<Marker> = Vec::new();
    for m in sorted {
        match out.last_mut() {
            Some(last)
                if m.secs - last.secs < (last.label.chars().count() + 2) as f64 * per_char =>
            {
                last.label = format!("{} + {}", last.label, m.label);
            }
            _ => out.push(m),
        }
    }
    out
}
