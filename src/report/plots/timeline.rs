//! The session timeline (lanes of events and phases), the participant's session chart and
//! the scatter of predictions against ratings.

use plotters::prelude::*;

use super::*;

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
