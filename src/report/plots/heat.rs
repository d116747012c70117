//! The heat strip (one row per series, colour for value) and its scale.

use plotters::prelude::*;

use super::*;

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
