//! SVG plots of the session report, drawn with `plotters` (no JavaScript, no network).
//!
//! Contract: every plot is a self-contained `<svg>` string with a `viewBox` (so it scales
//! to a phone's width and prints on A4), time on the x axis in session `mm:ss`, units in
//! the axis labels, the session's phases shaded behind the data. Legends are not drawn
//! inside a plot (they hide data): the page writes them under it ([`legend_html`]). Long
//! sessions are
//! downsampled to at most [`MAX_POINTS`] points a series (bucket means, gaps kept), which is
//! more than a screen's width shows, so a one-hour session draws as fast as a short one.

use plotters::prelude::*;
use plotters::style::FontStyle;

/// Points per series at most (about two per horizontal pixel at the plot's width).
pub const MAX_POINTS: usize = 1200;
use super::plot_data::WIDTH;
pub use super::plot_data::{downsample, esc, mmss, unclutter, with_gaps, Marker};

/// The palette (colour-blind safe, Okabe-Ito), cycled over series.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // DejaVu Sans (Bitstream Vera licence, assets/fonts/): plotters measures text with it;
        // the browser draws the labels with its own sans-serif.
        let bytes: &'static [u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
        if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_err() {
            tracing::warn!("the bundled font did not load; plot labels may be missing");
        }
    });
}

/// One line of a chart.
pub struct Series {
    pub label: String,
    /// (session seconds, value); NaN values are gaps.
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
    /// Drawn as dots rather than a line (sparse points, e.g. one per window).
    pub dots: bool,
    /// Drawn dashed (a reference level, e.g. a self-rating), not a measurement.
    pub dashed: bool,
}

impl Series {
    /// A solid line (or dots when `dots`).
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>, color: RGBColor) -> Self {
        Self {
            label: label.into(),
            points,
            color,
            dots: false,
            dashed: false,
        }
    }
}

/// What is drawn behind a time plot's data: phases as shaded bands (with their names at
/// the top), markers as thin vertical lines.
#[derive(Default, Clone, Copy)]
pub struct Backdrop<'a> {
    /// (start s, end s, phase name, colour).
    pub phases: &'a [(f64, f64, String, RGBColor)],
    pub markers: &'a [Marker],
}

/// The legend of a plot's series as HTML, written under the plot: a swatch in each
/// series' colour (a dash for dashed ones) and its label.
pub fn legend_html(series: &[Series]) -> String {
    let items: Vec<String> = series
        .iter()
        .map(|s| {
            let RGBColor(r, g, b) = s.color;
            let mark = if s.dashed {
                "&#8211; &#8211;"
            } else if s.dots {
                "&#9679;"
            } else {
                "&#9644;"
            };
            format!(
                "<span class=\"key\"><span style=\"color:#{r:02x}{g:02x}{b:02x}\">{mark}</span> {}</span>",
                esc(&s.label)
            )
        })
        .collect();
    format!("<p class=\"legend\">{}</p>\n", items.join(" "))
}

/// Shades `phases` over the y range, names at the top.
fn draw_backdrop<DB: DrawingBackend>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    backdrop: &Backdrop<'_>,
    y: (f64, f64),
) -> Result<(), String> {
    for (start, end, name, color) in backdrop.phases {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(*start, y.0), (*end, y.1)],
                color.mix(0.10).filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                name.replace('_', " "),
                (*start, y.0 + (y.1 - y.0) * 0.02),
                ("sans-serif", 10)
                    .into_font()
                    .color(&RGBColor(110, 110, 110)),
            )))
            .map_err(err)?;
    }
    let x_max = backdrop
        .phases
        .iter()
        .map(|p| p.1)
        .chain(backdrop.markers.iter().map(|m| m.secs))
        .fold(1.0f64, f64::max);
    for m in &unclutter(backdrop.markers, x_max) {
        chart
            .draw_series(LineSeries::new(
                [(m.secs, y.0), (m.secs, y.1)],
                RGBColor(150, 150, 150).stroke_width(1),
            ))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                m.label.clone(),
                (m.secs, y.1),
                ("sans-serif", 11).into_font().color(&RGBColor(90, 90, 90)),
            )))
            .map_err(err)?;
    }
    Ok(())
}

fn finish_svg(svg: String, height: u32) -> String {
    // A viewBox lets the page scale the plot to its width. Inline SVG in HTML needs no
    // namespace declaration, and the page carries no URL of any kind.
    svg.replace(" xmlns=\"http://www.w3.org/2000/svg\"", "")
        .replacen(
        &format!("<svg width=\"{WIDTH}\" height=\"{height}\""),
        &format!(
            "<svg viewBox=\"0 0 {WIDTH} {height}\" width=\"100%\" preserveAspectRatio=\"xMinYMin meet\""
        ),
        1,
    )
}

/// `svg` with a `<desc>` saying, per series, the session time its measured points span (a
/// plot's text for screen readers, and what a test reads to check that points are drawn at
/// their frames' own times). NaN values are gaps, not points.
fn described<'a>(svg: String, series: impl Iterator<Item = (&'a str, &'a [(f64, f64)])>) -> String {
    let spans: Vec<String> = series
        .map(|(label, points)| {
            let measured = || {
                points
                    .iter()
                    .filter(|(_, v)| v.is_finite())
                    .map(|(t, _)| *t)
            };
            match (measured().reduce(f64::min), measured().reduce(f64::max)) {
                (Some(first), Some(last)) => format!(
                    "{}: measured from {first:.2} s to {last:.2} s ({} points)",
                    esc(label),
                    measured().count()
                ),
                _ => format!("{}: no measured point", esc(label)),
            }
        })
        .collect();
    match svg.find('>') {
        Some(end) => format!(
            "{}<desc>{}</desc>{}",
            &svg[..=end],
            spans.join("; "),
            &svg[end + 1..]
        ),
        None => svg,
    }
}

fn err(e: impl std::fmt::Display) -> String {
    format!("cannot draw a plot: {e}")
}

/// Label areas and top margin of a chart, in pixels.
struct Frame {
    x_labels: u32,
    y_labels: u32,
    top: u32,
}

/// The one way a plot is made: a white `WIDTH` x `height` SVG with the label areas of
/// `frame`, axes over `x` and `y`, drawn by the block (which sees the chart as `$chart` and
/// evaluates to `Result<(), String>`), made scalable by `finish_svg`. A macro rather than a
/// function taking a closure: the chart borrows the drawing area, which borrows the SVG
/// string, and those two lifetimes cannot be named in a closure parameter's type.
macro_rules! draw_svg {
    ($height:expr, $frame:expr, $x:expr, $y:expr, |$chart:ident| $body:block $(,)?) => {{
        register_font();
        let frame: Frame = $frame;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, $height)).into_drawing_area();
            root.fill(&WHITE).map_err(err)?;
            #[allow(unused_mut)]
            let mut $chart = ChartBuilder::on(&root)
                .margin(8)
                .margin_top(frame.top)
                .x_label_area_size(frame.x_labels)
                .y_label_area_size(frame.y_labels)
                .build_cartesian_2d($x, $y)
                .map_err(err)?;
            let drawn: Result<(), String> = $body;
            drawn?;
            root.present().map_err(err)?;
        }
        Ok(finish_svg(svg, $height))
    }};
}

/// The label of a lane chart's tick at `y`: lanes are drawn top to bottom, lane `i` (of
/// `n`) centred at `n - 1 - i + 0.5`; ticks between lanes are unlabelled.
fn lane_label<'a>(y: f64, n: usize, label: impl Fn(usize) -> &'a str) -> String {
    let k = (y - 0.5).round();
    if (y - 0.5 - k).abs() > 1e-6 || k < 0.0 || k as usize >= n {
        return String::new();
    }
    label(n - 1 - k as usize).to_string()
}

mod bars;
mod heat;
mod line;
mod timeline;

pub use bars::bar_chart;
pub use heat::{heat_scale_html, heat_strip};
pub use line::line_chart;
pub use timeline::{scatter, session_chart, timeline, Lane};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_further_apart_than_a_step_are_not_joined() {
        let p = [
            (9.0, 3.0),
            (10.0, 3.1),
            (11.0, 3.2),
            (27.0, 3.0),
            (28.0, 2.9),
        ];
        let g = with_gaps(&p, 1.5);
        assert_eq!(g.len(), 6);
        assert!(g[3].1.is_nan() && g[3].0 > 11.0 && g[3].0 < 27.0);
        assert_eq!(with_gaps(&p[..3], 1.5), p[..3].to_vec());
    }

    #[test]
    fn a_plot_says_the_time_its_measured_points_span() {
        let fixed = [(0.5, f64::NAN), (1.0, 2.0), (16.5, 3.0)];
        let svg = described(
            "<svg viewBox=\"0 0 1 1\"><g/></svg>".into(),
            [("yaw <Ry>", fixed.as_slice()), ("none", &[][..])].into_iter(),
        );
        assert_eq!(
            svg,
            "<svg viewBox=\"0 0 1 1\"><desc>yaw &lt;Ry&gt;: measured from 1.00 s to 16.50 s (2 points); none: no measured point</desc><g/></svg>"
        );
    }

    #[test]
    fn escaped_text_carries_no_control_character() {
        assert_eq!(
            esc("a\0b\u{1b}[31m<c>\n"),
            "a\u{FFFD}b\u{FFFD}[31m&lt;c&gt;\n"
        );
    }

    #[test]
    fn markers_too_close_to_read_are_joined() {
        let m = |secs: f64, label: &str| Marker {
            secs,
            label: label.into(),
        };
        let joined = unclutter(
            &[m(61.0, "story 2"), m(60.0, "story 1"), m(300.0, "story 3")],
            600.0,
        );
        assert_eq!(joined.len(), 2);
        assert_eq!(joined[0].label, "story 1 + story 2");
        assert_eq!(joined[0].secs, 60.0);
        // Far enough apart at this scale: kept apart.
        assert_eq!(unclutter(&[m(60.0, "a"), m(70.0, "b")], 100.0).len(), 2);
    }

    #[test]
    fn mmss_and_downsampling_keep_gaps() {
        assert_eq!(mmss(0.0), "00:00");
        assert_eq!(mmss(75.4), "01:15");
        assert_eq!(mmss(3725.0), "1:02:05");
        let pts: Vec<(f64, f64)> = (0..100).map(|i| (i as f64, 1.0)).collect();
        assert_eq!(downsample(&pts, 100.0, 200).len(), 100);
        let pts: Vec<(f64, f64)> = (0..1000)
            .filter(|i| !(400..600).contains(i))
            .map(|i| (i as f64 / 10.0, 2.0))
            .collect();
        let d = downsample(&pts, 100.0, 10);
        assert_eq!(d.len(), 10);
        assert_eq!(d[0].1, Some(2.0));
        assert_eq!(d[4].1, None, "the gap stays a gap");
    }

    #[test]
    fn a_chart_is_a_scalable_svg_with_its_labels() {
        let svg = line_chart(
            "score (1-5)",
            (1.0, 5.0),
            60.0,
            &[Series::new(
                "text-zero-shot",
                vec![(10.0, 2.0), (20.0, 3.0)],
                PALETTE[0],
            )],
            &Backdrop {
                phases: &[(0.0, 12.0, "story_share".into(), PALETTE[1])],
                markers: &[Marker {
                    secs: 15.0,
                    label: "story 1".into(),
                }],
            },
        )
        .unwrap();
        assert!(
            svg.starts_with("<svg viewBox=\"0 0 900 230\""),
            "{}",
            &svg[..80]
        );
        assert!(svg.contains("00:30") && svg.contains("score (1-5)") && svg.contains("story 1"));
        assert!(svg.contains("story share"), "phases are named");
    }
}
