//! The line chart of a per-frame or per-window series over session time.

use plotters::prelude::*;

use super::*;

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
