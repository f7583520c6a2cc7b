//! The rendering every report shares: aligned tables, CSV lines, JSON text.

use serde_json::Value;

/// Aligned columns (right-aligned where `right`), with a rule under the heading and before
/// row `rule_before` (the totals).
pub(super) fn table<const N: usize>(
    rows: &[[String; N]],
    right: &[bool; N],
    rule_before: Option<usize>,
) -> String {
    let right: Vec<usize> = (0..N).filter(|&c| right[c]).collect();
    let rules: Vec<usize> = [Some(1), rule_before]
        .into_iter()
        .flatten()
        .filter(|&i| i < rows.len())
        .collect();
    crate::tools::output::aligned(rows, &right, &rules)
}

/// A heading row of a table.
pub(super) fn heading<const N: usize>(names: [&str; N]) -> [String; N] {
    names.map(String::from)
}

/// Free text (a memo) on one line of a table: its line breaks and tabs as spaces.
pub(super) fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// One CSV field (RFC 4180): quoted, its quotes doubled, when it holds a comma, a quote or a
/// line break; as it is otherwise.
pub(super) fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}

/// One CSV line of `cells` (each quoted as it needs), ending with a line break.
pub(super) fn csv_line<S: AsRef<str>>(cells: &[S]) -> String {
    let fields: Vec<String> = cells.iter().map(|c| csv_field(c.as_ref())).collect();
    let mut line = fields.join(",");
    line.push('\n');
    line
}

/// A JSON report's text: the object, indented, and a line break.
pub(super) fn json_text(v: &Value) -> String {
    let mut text = serde_json::to_string_pretty(v).expect("JSON of plain values");
    text.push('\n');
    text
}
