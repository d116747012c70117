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
        let bytes: &'static [u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
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

/// A line chart over session time, phases and markers behind the data (legend: see
/// [`legend_html`]).
pub fn line_chart(
    y_desc: &str,
    y_range: (f64, f64),
    duration: f64,
    series: &[Series],
    backdrop: &Backdrop<'_>,
) -> Result<String, String> {
    let height = 230;
    let x_max = duration.max(1.0);
    let svg: Result<String, String> = draw_svg!(
        height,
        Frame {
            x_labels: 34,
            y_labels: 56,
            top: 8
        },
        0f64..x_max,
        y_range.0..y_range.1,
        |chart| {
            chart
                .configure_mesh()
                .x_desc("session time (mm:ss)")
                .y_desc(y_desc)
                .x_label_formatter(&|x| mmss(*x))
                .x_labels(10)
                .y_labels(6)
                .light_line_style(RGBColor(235, 235, 235))
                .label_style(("sans-serif", 13))
                .axis_desc_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            draw_backdrop(&mut chart, backdrop, y_range)?;
            for s in series {
                let color = s.color;
                let points = downsample(&s.points, x_max, MAX_POINTS);
                if s.dots {
                    chart
                        .draw_series(
                            points
                                .iter()
                                .filter_map(|(t, v)| v.filter(|v| v.is_finite()).map(|v| (*t, v)))
                                .map(|p| Circle::new(p, 3, color.filled())),
                        )
                        .map_err(err)?;
                } else {
                    // Split at gaps so a missing stretch is not bridged by a line.
                    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
                    for (t, v) in points {
                        match v.filter(|v| v.is_finite()) {
                            Some(v) => runs.last_mut().map(|r| r.push((t, v))).unwrap_or(()),
                            None => runs.push(Vec::new()),
                        }
                    }
                    for run in runs.into_iter().filter(|r| !r.is_empty()) {
                        if run.len() == 1 {
                            // A lone sample between gaps: a dot, or it would not show.
                            chart
                                .draw_series(
                                    run.into_iter().map(|p| Circle::new(p, 3, color.filled())),
                                )
                                .map_err(err)?;
                        } else if s.dashed {
                            chart
                                .draw_series(DashedLineSeries::new(
                                    run,
                                    8,
                                    5,
                                    color.stroke_width(2),
                                ))
                                .map_err(err)?;
                        } else {
                            chart
                                .draw_series(LineSeries::new(run, color.stroke_width(2)))
                                .map_err(err)?;
                        }
                    }
                }
            }
            Ok(())
        },
    );
    svg.map(|svg| {
        described(
            svg,
            series
                .iter()
                .map(|s| (s.label.as_str(), s.points.as_slice())),
        )
    })
}

/// The colour of `v` on the heat strip's scale (white = 0, dark blue = `max`).
fn heat_color(v: f64, max: f64) -> RGBColor {
    let a = (v / max).clamp(0.0, 1.0);
    RGBColor(
        (255.0 - a * 247.0) as u8,
        (255.0 - a * 207.0) as u8,
        (255.0 - a * 148.0) as u8,
    )
}

/// The heat strip's colour scale as HTML (written under the strip): 0 to `max` in `unit`,
/// and the grey of no measurement.
pub fn heat_scale_html(max: f64, unit: &str) -> String {
    let stops: Vec<String> = (0..=4)
        .map(|i| {
            let RGBColor(r, g, b) = heat_color(max * f64::from(i) / 4.0, max);
            format!("#{r:02x}{g:02x}{b:02x}")
        })
        .collect();
    format!(
        "<p class=\"legend\">{unit}: 0 <span class=\"scale\" style=\"background:linear-gradient(to right,{})\"></span> {max} <span class=\"key\"><span class=\"swatch\" style=\"background:#e1e1e1\"></span> no face</span></p>\n",
        stops.join(",")
    )
}

/// Rows of intensities over time as a heat strip (one row per name; white = 0, dark blue
/// = `max`, see [`heat_scale_html`]; grey = no measurement), under a row of the phases.
pub fn heat_strip(
    rows: &[(String, Vec<(f64, f64)>)],
    phases: &[(f64, f64, String, RGBColor)],
    duration: f64,
    max: f64,
) -> Result<String, String> {
    let row_h = 16u32;
    let lanes = rows.len() + 1;
    let height = 44 + row_h * lanes as u32;
    let buckets = 300usize;
    let x_max = duration.max(1.0);
    let svg: Result<String, String> = draw_svg!(
        height,
        Frame {
            x_labels: 30,
            y_labels: 170,
            top: 8
        },
        0f64..x_max,
        0f64..lanes as f64,
        |chart| {
            chart
                .configure_mesh()
                .disable_y_mesh()
                .disable_x_mesh()
                .x_desc("session time (mm:ss)")
                .x_label_formatter(&|x| mmss(*x))
                .x_labels(10)
                .y_labels(lanes * 2 + 1)
                .y_label_formatter(&|y| {
                    lane_label(*y, lanes, |i| if i == 0 { "phase" } else { &rows[i - 1].0 })
                })
                .label_style(("sans-serif", 11))
                .axis_desc_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            let top = (lanes - 1) as f64;
            for (start, end, _, color) in phases {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(*start, top + 0.15), (*end, top + 0.85)],
                        color.mix(0.6).filled(),
                    )))
                    .map_err(err)?;
            }
            let width = x_max / buckets as f64;
            for (k, (_, points)) in rows.iter().enumerate() {
                let y = (rows.len() - 1 - k) as f64;
                let cells = downsample(points, x_max, buckets);
                let dense = points.len() > buckets;
                chart
                    .draw_series(cells.iter().map(|(t, v)| {
                        let (x0, x1) = if dense {
                            (t - width / 2.0, t + width / 2.0)
                        } else {
                            (*t, t + width.max(1.0 / 15.0))
                        };
                        let color = match v {
                            Some(v) if v.is_finite() => heat_color(*v, max),
                            _ => RGBColor(225, 225, 225),
                        };
                        Rectangle::new([(x0, y), (x1, y + 1.0)], color.filled())
                    }))
                    .map_err(err)?;
            }
            Ok(())
        },
    );
    svg.map(|svg| {
        described(
            svg,
            rows.iter()
                .map(|(label, points)| (label.as_str(), points.as_slice())),
        )
    })
}

/// Spans on one lane per row (phases, speech), with point markers (stories, ratings).
pub struct Lane {
    pub label: String,
    pub spans: Vec<(f64, f64, String, RGBColor)>,
}

/// The session's timeline: lanes of labelled spans over time, and markers.
pub fn timeline(lanes: &[Lane], markers: &[Marker], duration: f64) -> Result<String, String> {
    let lane_h = 30u32;
    let height = 60 + lane_h * lanes.len() as u32;
    let x_max = duration.max(1.0);
    let n = lanes.len() as f64;
    draw_svg!(
        height,
        Frame {
            x_labels: 30,
            y_labels: 90,
            top: 22
        },
        0f64..x_max,
        0f64..n,
        |chart| {
            chart
                .configure_mesh()
                .disable_y_mesh()
                .x_desc("session time (mm:ss)")
                .x_label_formatter(&|x| mmss(*x))
                .x_labels(10)
                .y_labels(lanes.len() * 2 + 1)
                .y_label_formatter(&|y| lane_label(*y, lanes.len(), |i| &lanes[i].label))
                .label_style(("sans-serif", 12))
                .axis_desc_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            for (k, lane) in lanes.iter().enumerate() {
                let y = n - 1.0 - k as f64;
                for (a, b, label, color) in &lane.spans {
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(*a, y + 0.15), (b.max(a + 0.05), y + 0.85)],
                            color.mix(0.55).filled(),
                        )))
                        .map_err(err)?;
                    if !label.is_empty() && (b - a) / x_max > 0.06 {
                        chart
                            .draw_series(std::iter::once(Text::new(
                                label.clone(),
                                (a + x_max * 0.004, y + 0.62),
                                ("sans-serif", 11).into_font(),
                            )))
                            .map_err(err)?;
                    }
                }
            }
            for m in &unclutter(markers, x_max) {
                chart
                    .draw_series(LineSeries::new(
                        [(m.secs, 0.0), (m.secs, n)],
                        RGBColor(60, 60, 60).stroke_width(1),
                    ))
                    .map_err(err)?;
                chart
                    .draw_series(std::iter::once(Text::new(
                        m.label.clone(),
                        (m.secs, n + 0.05),
                        ("sans-serif", 11).into_font(),
                    )))
                    .map_err(err)?;
            }
            Ok(())
        },
    )
}

/// Draws each series as dots, with a legend at `legend`.
type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

fn draw_dots<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    series: &[Series],
    legend: SeriesLabelPosition,
) -> Result<(), String> {
    for s in series {
        let color = s.color;
        chart
            .draw_series(
                s.points
                    .iter()
                    .map(|p| Circle::new(*p, 4, color.mix(0.7).filled())),
            )
            .map_err(err)?
            .label(s.label.clone())
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(err)
}

/// Values per session (x = session number, 1-based), as dots.
pub fn session_chart(
    y_desc: &str,
    y_range: (f64, f64),
    sessions: usize,
    series: &[Series],
) -> Result<String, String> {
    let height = 230;
    draw_svg!(
        height,
        Frame {
            x_labels: 34,
            y_labels: 56,
            top: 8
        },
        0.5f64..sessions as f64 + 0.5,
        y_range.0..y_range.1,
        |chart| {
            chart
                .configure_mesh()
                .x_desc("session (oldest first)")
                .y_desc(y_desc)
                .x_labels(sessions.min(20))
                .x_label_formatter(&|x| {
                    if (x - x.round()).abs() < 1e-6 {
                        format!("{}", x.round())
                    } else {
                        String::new()
                    }
                })
                .label_style(("sans-serif", 13))
                .axis_desc_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            draw_dots(&mut chart, series, SeriesLabelPosition::UpperRight)?;
            Ok(())
        },
    )
}

/// Predicted against rated on the 1-5 scale, with the diagonal.
pub fn scatter(x_desc: &str, y_desc: &str, series: &[Series]) -> Result<String, String> {
    let height = 360;
    draw_svg!(
        height,
        Frame {
            x_labels: 34,
            y_labels: 56,
            top: 8
        },
        0.5f64..5.5,
        0.5f64..5.5,
        |chart| {
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_labels(6)
                .y_labels(6)
                .label_style(("sans-serif", 13))
                .axis_desc_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            chart
                .draw_series(LineSeries::new(
                    [(0.5, 0.5), (5.5, 5.5)],
                    RGBColor(160, 160, 160).stroke_width(1),
                ))
                .map_err(err)?;
            draw_dots(&mut chart, series, SeriesLabelPosition::UpperLeft)?;
            Ok(())
        },
    )
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

/// A horizontal bar chart of signed contributions (label, value), one bar a row from a zero
/// line in the middle: raising to the right in the first palette colour, lowering to the
/// left in the sixth; each bar's value written beside it. Hand-drawn SVG (bars need no axes
/// beyond the zero line), with the values in its `<desc>`.
pub fn bar_chart(unit: &str, items: &[(String, f64)]) -> String {
    let row = 22.0;
    let label_w = 260.0;
    // A gutter each side for the value written beyond the longest bar.
    let gutter = 64.0;
    let width = f64::from(WIDTH);
    let bar_w = (width - label_w - 2.0 * gutter) / 2.0;
    let zero = label_w + gutter + bar_w;
    let max = items
        .iter()
        .map(|(_, v)| v.abs())
        .fold(0.0, f64::max)
        .max(1e-9);
    let height = row * items.len() as f64 + 26.0;
    let color = |c: RGBColor| format!("rgb({},{},{})", c.0, c.1, c.2);
    let mut svg = format!(
        "<svg viewBox=\"0 0 {width} {height}\" width=\"100%\" preserveAspectRatio=\"xMinYMin meet\" font-family=\"sans-serif\" font-size=\"13\"><desc>{}</desc>",
        items
            .iter()
            .map(|(l, v)| format!("{}: {v:+.3}", esc(l)))
            .collect::<Vec<_>>()
            .join("; ")
    );
    for (i, (label, value)) in items.iter().enumerate() {
        let y = 6.0 + row * i as f64;
        let len = bar_w * value.abs() / max;
        let (x, fill, text_x, anchor) = if *value >= 0.0 {
            (zero, color(PALETTE[0]), zero + len + 4.0, "start")
        } else {
            (zero - len, color(PALETTE[5]), zero - len - 4.0, "end")
        };
        svg.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{len:.1}\" height=\"{:.1}\" fill=\"{fill}\"/>\
             <text x=\"{text_x:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{value:+.3}</text>",
            label_w - 8.0,
            y + 14.0,
            esc(label),
            row - 6.0,
            y + 14.0,
        ));
    }
    let bottom = 6.0 + row * items.len() as f64;
    svg.push_str(&format!(
        "<line x1=\"{zero:.1}\" y1=\"2\" x2=\"{zero:.1}\" y2=\"{bottom:.1}\" stroke=\"#444\"/>\
         <text x=\"{zero:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#444\">0 ({})</text></svg>",
        bottom + 16.0,
        esc(unit)
    ));
    svg
}

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
