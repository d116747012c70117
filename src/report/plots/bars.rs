//! The bar chart of signed contributions (the report's "why" panel): hand-drawn SVG.

use super::*;

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
