//! Reading the CSVs the tests compare: ours (`extract audio`, `extract face`) and the
//! references (openSMILE, OpenFace).

use std::path::Path;

/// (header, rows) of a CSV of numbers, comma-separated, cells trimmed (OpenFace writes
/// `, `). Empty cells read as NaN (OpenFace leaves unmeasured cells empty); any other cell
/// that is not a number fails the test, naming the file, line and cell.
pub fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<f64>>) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut lines = text.lines();
    let header = lines
        .next()
        .unwrap_or_else(|| panic!("{} is empty", path.display()))
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let rows = lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            l.split(',')
                .map(|c| match c.trim() {
                    "" => f64::NAN,
                    c => c.parse::<f64>().unwrap_or_else(|_| {
                        panic!("{} line {}: `{c}` is not a number", path.display(), i + 2)
                    }),
                })
                .collect()
        })
        .collect();
    (header, rows)
}
