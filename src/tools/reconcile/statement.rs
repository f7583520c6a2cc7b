//! Reading a statement: a CSV file with a header line (RFC 4180 quoting, read by the `csv`
//! crate), whose date, amount and reference columns are named by flags. Every refusal names
//! the file, the line and what is wrong with it.

use super::matching::StatementLine;
use super::{MAX_LINE_BYTES, MAX_STATEMENT_LINES, PROGRESS_EVERY};
use ledger_client::{Amount, MAX_AMOUNT_DIGITS};
use std::cell::RefCell;
use std::io::Read;
use std::path::Path;
use std::rc::Rc;
use std::str::FromStr;
use time::format_description::well_known::Rfc3339;
use time::{Date, OffsetDateTime, UtcOffset};

/// Which columns hold what, and how fields are separated.
#[derive(Clone, Debug)]
pub struct Columns {
    pub date: String,
    pub amount: String,
    /// `None`: the statement has no references.
    pub reference: Option<String>,
    pub delimiter: u8,
}

/// A statement line as read: its amount as written, before the account's scale is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawLine {
    pub line: u64,
    pub day: Date,
    pub amount: Amount,
    pub reference: String,
}

/// Where the columns are in each record.
struct Positions {
    date: usize,
    amount: usize,
    reference: Option<usize>,
}

/// Reads the statement at `path` (`-`: standard input), calling `progress` with the count of
/// lines read every [`PROGRESS_EVERY`].
pub fn read(
    path: &Path,
    columns: &Columns,
    progress: impl FnMut(usize),
) -> Result<Vec<RawLine>, String> {
    let name = path.display().to_string();
    let input: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path)
            .map_err(|e| format!("cannot read the statement {name}: {e}"))?;
        Box::new(std::io::BufReader::new(file))
    };
    parse(&name, input, columns, progress)
}

/// [`read`] of any input, `name` naming it in errors.
pub fn parse(
    name: &str,
    input: impl Read,
    columns: &Columns,
    mut progress: impl FnMut(usize),
) -> Result<Vec<RawLine>, String> {
    let newlines = Newlines::default();
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(columns.delimiter)
        .trim(csv::Trim::All)
        .from_reader(LineBound {
            inner: input,
            run: 0,
            read: 0,
            last: 0,
            newlines: newlines.clone(),
        });
    let header = reader
        .headers()
        .map_err(|e| csv_error(name, &e, &newlines))?
        .clone();
    let at = positions(name, &header, columns)?;
    let mut lines = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| csv_error(name, &e, &newlines))?;
        let line = newlines.line_of(record.position());
        if lines.len() == MAX_STATEMENT_LINES {
            return Err(format!(
                "{name} line {line}: the statement has more than {MAX_STATEMENT_LINES} lines (MAX_STATEMENT_LINES); split it into periods"
            ));
        }
        let field = |i: usize| record.get(i).unwrap_or_default();
        let day = parse_day(field(at.date))
            .map_err(|why| format!("{name} line {line}: {} {why}", columns.date))?;
        let amount = parse_amount(field(at.amount))
            .map_err(|why| format!("{name} line {line}: {} {why}", columns.amount))?;
        let reference = at.reference.map(field).unwrap_or_default().to_owned();
        lines.push(RawLine {
            line,
            day,
            amount,
            reference,
        });
        if lines.len() % PROGRESS_EVERY == 0 {
            progress(lines.len());
        }
    }
    Ok(lines)
}

/// The statement's lines with amounts in minor units at the account's `scale`, negated when
/// `negate`: refused, naming the line, if one has more decimals than the scale (never rounded)
/// or more digits than a leg may have.
pub fn at_scale(
    name: &str,
    raw: Vec<RawLine>,
    scale: u32,
    negate: bool,
    account: &str,
) -> Result<Vec<StatementLine>, String> {
    raw.into_iter()
        .map(|r| {
            let minor = minor_at(r.amount, scale).map_err(|why| {
                format!(
                    "{name} line {}: amount {} {why} (account {account} has scale {scale})",
                    r.line, r.amount
                )
            })?;
            Ok(StatementLine {
                line: r.line,
                day: r.day,
                amount: if negate { -minor } else { minor },
                reference: r.reference,
            })
        })
        .collect()
}

/// `amount` in minor units at `scale`, or why it cannot be: more decimals than the scale
/// carries, or more than [`MAX_AMOUNT_DIGITS`] digits at it.
pub fn minor_at(amount: Amount, scale: u32) -> Result<i128, String> {
    let digits = || {
        format!(
            "has more than {MAX_AMOUNT_DIGITS} digits (MAX_AMOUNT_DIGITS) at the account's scale"
        )
    };
    let minor = if amount.scale() <= scale {
        10i128
            .checked_pow(scale - amount.scale())
            .and_then(|f| amount.minor().checked_mul(f))
            .ok_or_else(digits)?
    } else {
        let f = 10i128
            .checked_pow(amount.scale() - scale)
            .unwrap_or(i128::MAX);
        if amount.minor() % f != 0 {
            return Err(
                "has more decimal places than the account's scale (refused, never rounded)".into(),
            );
        }
        amount.minor() / f
    };
    if minor.unsigned_abs() >= 10u128.pow(MAX_AMOUNT_DIGITS) {
        return Err(digits());
    }
    Ok(minor)
}

/// Where the named columns are in the header (names compared without case).
fn positions(
    name: &str,
    header: &csv::StringRecord,
    columns: &Columns,
) -> Result<Positions, String> {
    let find = |column: &str, flag: &str| -> Result<usize, String> {
        let found: Vec<usize> = (0..header.len())
            .filter(|&i| header[i].eq_ignore_ascii_case(column))
            .collect();
        match found[..] {
            [i] => Ok(i),
            [] => Err(format!(
                "{name} line 1: the header has no column {column:?} (its columns: {}); name it with {flag}",
                header.iter().collect::<Vec<_>>().join(", ")
            )),
            _ => Err(format!(
                "{name} line 1: the header has {} columns named {column:?}; rename one",
                found.len()
            )),
        }
    };
    Ok(Positions {
        date: find(&columns.date, "--date-column")?,
        amount: find(&columns.amount, "--amount-column")?,
        reference: columns
            .reference
            .as_deref()
            .map(|r| {
                find(
                    r,
                    "--reference-column (empty: the statement has no references)",
                )
            })
            .transpose()?,
    })
}

/// The forms a statement's date may take.
const DATE_FORMS: &str = "YYYY-MM-DD or RFC 3339 (2026-11-30T14:00:00+01:00: its day in UTC)";

/// A date: `YYYY-MM-DD`, or an RFC 3339 time, whose day in UTC it is.
pub fn parse_day(text: &str) -> Result<Date, String> {
    let day = time::macros::format_description!("[year]-[month]-[day]");
    if let Ok(d) = Date::parse(text, &day) {
        return Ok(d);
    }
    match OffsetDateTime::parse(text, &Rfc3339) {
        Ok(t) => Ok(t.to_offset(UtcOffset::UTC).date()),
        Err(_) => Err(format!("{text:?} is not a date: give {DATE_FORMS}")),
    }
}

/// An amount as a statement writes it: a decimal number with an optional sign.
pub fn parse_amount(text: &str) -> Result<Amount, String> {
    let bad = || {
        format!(
            "{text:?} is not a decimal number: digits with an optional '.' and decimals after an optional sign, no thousands separator, no currency"
        )
    };
    let unsigned = match text.strip_prefix('+') {
        Some(rest) if rest.starts_with(['+', '-']) => return Err(bad()),
        Some(rest) => rest,
        None => text,
    };
    Amount::from_str(unsigned).map_err(|_| bad())
}

/// The byte offsets of the newlines read so far, each with whether a carriage return comes
/// just before it, shared by the reader that finds them and the parser that names lines (the
/// CSV reader's own count leaves blank lines out).
#[derive(Clone, Default)]
struct Newlines(Rc<RefCell<Vec<(u64, bool)>>>);

impl Newlines {
    /// The line (1: the first) of a record the CSV reader places at `at`: the byte after the
    /// record before it, so past the line ends and blank lines from there.
    fn line_of(&self, at: Option<&csv::Position>) -> u64 {
        let Some(at) = at else { return 0 };
        let newlines = self.0.borrow();
        let mut line = newlines.partition_point(|&(n, _)| n < at.byte());
        let mut from = at.byte();
        while let Some(&(n, cr)) = newlines.get(line) {
            if n != from && !(cr && n == from + 1) {
                break;
            }
            from = n + 1;
            line += 1;
        }
        line as u64 + 1
    }
}

/// Standard input or a file, noting its newlines and refusing a line longer than
/// [`MAX_LINE_BYTES`] before it is held in memory whole.
struct LineBound<R> {
    inner: R,
    /// Bytes since the last newline.
    run: usize,
    /// Bytes read.
    read: u64,
    /// The last byte read.
    last: u8,
    newlines: Newlines,
}

impl<R: Read> Read for LineBound<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut newlines = self.newlines.0.borrow_mut();
        for (i, &b) in buf[..n].iter().enumerate() {
            let cr = std::mem::replace(&mut self.last, b) == b'\r';
            if b == b'\n' {
                newlines.push((self.read + i as u64, cr));
                self.run = 0;
                continue;
            }
            self.run += 1;
            if self.run > MAX_LINE_BYTES {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "line {} is longer than {MAX_LINE_BYTES} bytes (MAX_LINE_BYTES)",
                        newlines.len() + 1
                    ),
                ));
            }
        }
        self.read += n as u64;
        Ok(n)
    }
}

/// A CSV reader's error, naming the file and the line.
fn csv_error(name: &str, e: &csv::Error, newlines: &Newlines) -> String {
    let line = |p: &Option<csv::Position>| newlines.line_of(p.as_ref());
    match e.kind() {
        csv::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            format!("{name} {io}")
        }
        csv::ErrorKind::Io(io) => format!("cannot read the statement {name}: {io}"),
        csv::ErrorKind::Utf8 { pos, .. } => format!(
            "{name} line {}: not UTF-8; convert the file (say iconv -f WINDOWS-1252 -t UTF-8)",
            line(pos)
        ),
        csv::ErrorKind::UnequalLengths {
            pos,
            expected_len,
            len,
        } => format!(
            "{name} line {}: {len} fields, but the header has {expected_len}",
            line(pos)
        ),
        _ => format!("{name}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns() -> Columns {
        Columns {
            date: "date".into(),
            amount: "amount".into(),
            reference: Some("reference".into()),
            delimiter: b',',
        }
    }

    fn read_text(text: &[u8], columns: &Columns) -> Result<Vec<RawLine>, String> {
        parse("bank.csv", text, columns, |_| {})
    }

    fn day(s: &str) -> Date {
        parse_day(s).unwrap()
    }

    #[test]
    fn a_statement_is_read_with_its_columns_by_name_quoted_fields_signs_and_dates_in_utc() {
        let text = "\u{feff}Booking,Reference,Amount,Date\n\
                    x,\"INV-1, part 2\",+3,2026-11-30\n\
                    y,,-12.5,2026-12-01T00:30:00+01:00\n\
                    \n\
                    z,  R-9 ,0.05,2026-12-01T23:30:00-01:00\n";
        let got = read_text(text.as_bytes(), &columns()).unwrap();
        let line = |line, d: &str, a: &str, r: &str| RawLine {
            line,
            day: day(d),
            amount: a.parse().unwrap(),
            reference: r.into(),
        };
        assert_eq!(
            got,
            vec![
                line(2, "2026-11-30", "3", "INV-1, part 2"),
                line(3, "2026-11-30", "-12.5", ""),
                line(5, "2026-12-02", "0.05", "R-9"),
            ]
        );
        let lines = at_scale("bank.csv", got, 2, true, "assets:bank").unwrap();
        let amounts: Vec<i128> = lines.iter().map(|l| l.amount).collect();
        assert_eq!(amounts, [-300, 1250, -5], "negated, in minor units");
        let no_references = Columns {
            reference: None,
            delimiter: b';',
            ..columns()
        };
        let got = read_text(b"date;amount\n2026-11-30;1\n", &no_references).unwrap();
        assert_eq!(got[0].reference, "");
    }

    #[test]
    fn line_numbers_count_every_line_of_the_file_blank_crlf_and_inside_quotes() {
        let text =
            "date,amount,reference\r\n\r\n2026-11-30,1,\"two\nlines\"\r\n\n2026-11-30,2,\r\n";
        let got = read_text(text.as_bytes(), &columns()).unwrap();
        let lines: Vec<(u64, &str)> = got.iter().map(|l| (l.line, l.reference.as_str())).collect();
        assert_eq!(lines, [(3, "two\nlines"), (6, "")]);
        let text = "date,amount,reference\n\n\n2026-11-30,x,\n";
        let e = read_text(text.as_bytes(), &columns()).unwrap_err();
        assert!(e.starts_with("bank.csv line 4: amount \"x\""), "{e}");
    }

    #[test]
    fn a_malformed_statement_is_refused_naming_the_file_the_line_and_what_is_wrong() {
        let long = format!(
            "date,amount,reference\n2026-11-30,1,{}\n",
            "x".repeat(20_000)
        );
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                b"day,amount,reference\n".to_vec(),
                "bank.csv line 1: the header has no column \"date\" (its columns: day, amount, reference); name it with --date-column",
            ),
            (
                b"date,amount,Amount\n".to_vec(),
                "bank.csv line 1: the header has 2 columns named \"amount\"",
            ),
            (
                b"date,amount,reference\n2026-11-30,1,a\n05/11/2026,1,b\n".to_vec(),
                "bank.csv line 3: date \"05/11/2026\" is not a date: give YYYY-MM-DD or RFC 3339",
            ),
            (
                b"date,amount,reference\n2026-11-30,\"1,234.00\",a\n".to_vec(),
                "bank.csv line 2: amount \"1,234.00\" is not a decimal number",
            ),
            (
                b"date,amount,reference\n2026-11-30,+-1,a\n".to_vec(),
                "bank.csv line 2: amount \"+-1\" is not a decimal number",
            ),
            (
                b"date,amount,reference\n2026-11-30,EUR 1,a\n".to_vec(),
                "bank.csv line 2: amount \"EUR 1\" is not a decimal number",
            ),
            (
                b"date,amount,reference\n2026-11-30,1,a\n2026-11-30,1\n".to_vec(),
                "bank.csv line 3: 2 fields, but the header has 3",
            ),
            (
                b"date,amount,reference\n2026-11-30,1,caf\xe9\n".to_vec(),
                "bank.csv line 2: not UTF-8",
            ),
            (
                long.into_bytes(),
                "bank.csv line 2 is longer than 16384 bytes (MAX_LINE_BYTES)",
            ),
        ];
        for (text, want) in cases {
            let e = read_text(&text, &columns()).unwrap_err();
            assert!(e.starts_with(want), "{e}\nwanted: {want}");
        }
    }

    #[test]
    fn amounts_beyond_the_accounts_scale_or_a_legs_digits_are_refused_never_rounded() {
        let raw = |a: &str| {
            vec![RawLine {
                line: 7,
                day: day("2026-11-30"),
                amount: a.parse().unwrap(),
                reference: String::new(),
            }]
        };
        let ok = |a: &str, scale| at_scale("b.csv", raw(a), scale, false, "a").map(|l| l[0].amount);
        assert_eq!(ok("12.50", 1), Ok(125), "12.50 is 12.5");
        assert_eq!(ok("7", 2), Ok(700));
        assert_eq!(
            ok("12.345", 2).unwrap_err(),
            "b.csv line 7: amount 12.345 has more decimal places than the account's scale (refused, never rounded) (account a has scale 2)"
        );
        let e = ok(&"9".repeat(29), 2).unwrap_err();
        assert!(e.contains("more than 30 digits (MAX_AMOUNT_DIGITS)"), "{e}");
        assert_eq!(ok(&"9".repeat(28), 2), Ok(10i128.pow(30) - 100));
    }
}
