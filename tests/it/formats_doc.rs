//! docs/formats.md is the one place each format is specified: its "Versions" table must
//! say the version the code writes. Each row that names a constant (`NAME` in
//! `src/...rs`) is read against that constant in that file; a row that says "the same" uses
//! the file of the row above; the session store's version is the last migration's.

use std::path::Path;

use crate::common::root;

/// The digit runs of `text`, in order.
fn numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The backticked tokens of a table cell.
fn ticked(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

fn is_constant(token: &str) -> bool {
    token.len() > 1
        && token
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
        && token.chars().next().is_some_and(|c| c.is_ascii_uppercase())
}

/// The version a constant holds in `file`: an integer, or the number that ends a string
/// (`"empathic-key v1"`, `"1"`).
fn constant_in(file: &Path, name: &str) -> u64 {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let at = text
        .find(&format!("const {name}:"))
        .unwrap_or_else(|| panic!("no `const {name}` in {}", file.display()));
    let rest = &text[at..];
    let value = rest[rest.find('=').unwrap() + 1..rest.find(';').unwrap()].trim();
    *numbers(value)
        .last()
        .unwrap_or_else(|| panic!("{name} in {}: no version in `{value}`", file.display()))
}

#[test]
fn the_versions_table_of_formats_md_says_what_the_code_writes() {
    let doc = std::fs::read_to_string(root().join("docs/formats.md")).unwrap();
    let table: Vec<&str> = doc
        .split("## Versions")
        .nth(1)
        .expect("a Versions section")
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .collect();
    assert!(table.len() >= 15, "{} rows", table.len());
    let mut file = None;
    let mut checked = 0;
    let mut wrong = Vec::new();
    for row in table {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let (format, version, place) = (cells[0], cells[1], cells[2]);
        let tokens = ticked(place);
        if let Some(path) = tokens.iter().find(|t| t.ends_with(".rs")) {
            file = Some(root().join(path));
        } else if !place.starts_with("the same") {
            file = None;
        }
        let constants: Vec<&str> = tokens.into_iter().filter(|t| is_constant(t)).collect();
        if constants.is_empty() || place.starts_with("no constant") {
            continue;
        }
        let file = file
            .clone()
            .unwrap_or_else(|| panic!("{format}: constants named without a file"));
        let said = numbers(version);
        for (i, name) in constants.iter().enumerate() {
            let code = if *name == "MIGRATIONS" {
                empathic::store::schema::MIGRATIONS
                    .last()
                    .map(|m| m.0 as u64)
                    .unwrap()
            } else {
                constant_in(&file, name)
            };
            checked += 1;
            if said.get(i) != Some(&code) {
                wrong.push(format!(
                    "{format}: the table says {version:?}, {name} is {code}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/formats.md, Versions:\n{}",
        wrong.join("\n")
    );
    assert!(checked >= 15, "only {checked} constants checked");
}
