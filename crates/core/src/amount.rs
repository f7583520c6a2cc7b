//! Exact money: an amount is an integer count of minor units at an account's scale.
//!
//! Parsing never rounds: a value with more decimals than the scale, or more digits than
//! [`MAX_AMOUNT_DIGITS`], is refused with the reason.

use super::limits::{MAX_AMOUNT_DIGITS, MAX_SCALE};
use std::fmt;

/// A non-negative quantity of minor units at a fixed scale (`minor = 12345, scale = 2` is `123.45`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Amount {
    minor: i128,
    scale: u8,
}

/// Why a decimal string is not a valid leg amount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AmountError {
    /// Not of the form `digits[.digits]`.
    Malformed,
    /// Zero or negative.
    NotPositive,
    /// More decimals than the account's scale.
    TooManyDecimals { decimals: usize, scale: u8 },
    /// More than [`MAX_AMOUNT_DIGITS`] digits in minor units.
    TooLarge,
}

impl fmt::Display for AmountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AmountError::Malformed => {
                write!(f, "is not a decimal number of the form 123 or 123.45")
            }
            AmountError::NotPositive => write!(f, "must be greater than zero"),
            AmountError::TooManyDecimals { decimals, scale } => write!(
                f,
                "has {decimals} decimal places but the account's scale allows {scale}"
            ),
            AmountError::TooLarge => write!(
                f,
                "has more than {MAX_AMOUNT_DIGITS} digits (limit MAX_AMOUNT_DIGITS)"
            ),
        }
    }
}

impl Amount {
    /// Zero at `scale`.
    pub fn zero(scale: u8) -> Amount {
        assert!(u32::from(scale) <= MAX_SCALE, "scale {scale} out of range");
        Amount { minor: 0, scale }
    }

    /// An amount from minor units. Panics on a negative value: amounts are never negative.
    pub fn from_minor(minor: i128, scale: u8) -> Amount {
        assert!(minor >= 0, "amount {minor} is negative");
        assert!(u32::from(scale) <= MAX_SCALE, "scale {scale} out of range");
        Amount { minor, scale }
    }

    /// Parses a positive leg amount for an account of `scale`. Accepts `123`, `123.4`,
    /// `0.05`; refuses signs, exponents, spaces, a bare `.`, and anything that would round.
    pub fn parse_positive(text: &str, scale: u8) -> Result<Amount, AmountError> {
        let minor = parse_minor(text, scale)?;
        if minor == 0 {
            return Err(AmountError::NotPositive);
        }
        Ok(Amount { minor, scale })
    }

    /// Minor units.
    pub fn minor(&self) -> i128 {
        self.minor
    }

    /// Decimal places.
    pub fn scale(&self) -> u8 {
        self.scale
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_minor(self.minor, self.scale))
    }
}

/// Renders signed minor units with exactly `scale` decimals (`-5, 2` is `-0.05`).
pub fn format_minor(minor: i128, scale: u8) -> String {
    let negative = minor < 0;
    let digits = minor.unsigned_abs().to_string();
    let scale = usize::from(scale);
    let mut out = String::with_capacity(digits.len() + 3);
    if negative {
        out.push('-');
    }
    if scale == 0 {
        out.push_str(&digits);
        return out;
    }
    if digits.len() <= scale {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', scale - digits.len()));
        out.push_str(&digits);
    } else {
        let (int, frac) = digits.split_at(digits.len() - scale);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    }
    out
}

/// Parses a non-negative decimal into minor units at `scale`, exactly.
/// Used for leg amounts (by [`Amount::parse_positive`]) and for sums read back from storage.
pub fn parse_minor(text: &str, scale: u8) -> Result<i128, AmountError> {
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text, None),
    };
    if text.starts_with('-') {
        return Err(AmountError::NotPositive);
    }
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return Err(AmountError::Malformed);
    }
    let frac = match frac {
        Some(f) if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) => {
            return Err(AmountError::Malformed)
        }
        Some(f) => f,
        None => "",
    };
    if frac.len() > usize::from(scale) {
        return Err(AmountError::TooManyDecimals {
            decimals: frac.len(),
            scale,
        });
    }
    let int = int.trim_start_matches('0');
    let padding = usize::from(scale) - frac.len();
    if int.len() + usize::from(scale) > MAX_AMOUNT_DIGITS {
        return Err(AmountError::TooLarge);
    }
    let mut minor: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        minor = minor * 10 + i128::from(b - b'0');
    }
    for _ in 0..padding {
        minor *= 10;
    }
    Ok(minor)
}

/// Parses a decimal that may carry a minus sign (a floor, a ceiling, a condition's amount)
/// into minor units at `scale`, exactly.
pub fn parse_signed(text: &str, scale: u8) -> Result<i128, AmountError> {
    match text.strip_prefix('-') {
        Some(digits) => parse_minor(digits, scale).map(|m| -m),
        None => parse_minor(text, scale),
    }
}

/// Parses a signed decimal with exactly the digits storage wrote (a `numeric` read as text).
/// Anything that is not an exact decimal at `scale` is an error: a row written behind the
/// ledger's back, which the reader reports as a corrupt journal row.
pub fn parse_stored(text: &str, scale: u8) -> Result<i128, String> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    // numeric sums may carry fewer decimals than the scale (e.g. "0"), never more.
    let value = parse_stored_unsigned(digits, scale)
        .map_err(|e| format!("stored amount {text:?} at scale {scale}: {e}"))?;
    Ok(if negative { -value } else { value })
}

fn parse_stored_unsigned(text: &str, scale: u8) -> Result<i128, AmountError> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let frac = frac.trim_end_matches('0');
    if frac.len() > usize::from(scale)
        || int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(AmountError::Malformed);
    }
    let mut minor: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        minor = minor
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(b - b'0')))
            .ok_or(AmountError::TooLarge)?;
    }
    for _ in frac.len()..usize::from(scale) {
        minor = minor.checked_mul(10).ok_or(AmountError::TooLarge)?;
    }
    Ok(minor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn amounts_parse_exactly_or_say_why_not() {
        let table: &[(&str, u8, Result<i128, AmountError>)] = &[
            ("100", 2, Ok(10000)),
            ("100.5", 2, Ok(10050)),
            ("100.50", 2, Ok(10050)),
            ("0.01", 2, Ok(1)),
            ("007", 0, Ok(7)),
            ("0", 2, Err(AmountError::NotPositive)),
            ("0.00", 2, Err(AmountError::NotPositive)),
            ("-1", 2, Err(AmountError::NotPositive)),
            ("+1", 2, Err(AmountError::Malformed)),
            ("1e3", 2, Err(AmountError::Malformed)),
            (" 1", 2, Err(AmountError::Malformed)),
            ("1.", 2, Err(AmountError::Malformed)),
            (".5", 2, Err(AmountError::Malformed)),
            ("1.2.3", 2, Err(AmountError::Malformed)),
            ("", 2, Err(AmountError::Malformed)),
            ("abc", 2, Err(AmountError::Malformed)),
            ("1,00", 2, Err(AmountError::Malformed)),
            ("１", 0, Err(AmountError::Malformed)),
            (
                "1.001",
                2,
                Err(AmountError::TooManyDecimals {
                    decimals: 3,
                    scale: 2,
                }),
            ),
            (
                "1.000",
                2,
                Err(AmountError::TooManyDecimals {
                    decimals: 3,
                    scale: 2,
                }),
            ),
            (
                "1.5",
                0,
                Err(AmountError::TooManyDecimals {
                    decimals: 1,
                    scale: 0,
                }),
            ),
            (
                "999999999999999999999999999999",
                0,
                Ok(999_999_999_999_999_999_999_999_999_999),
            ),
            (
                "1000000000000000000000000000000",
                0,
                Err(AmountError::TooLarge),
            ),
            (
                "999999999999.999999999999999999",
                18,
                Ok(999_999_999_999_999_999_999_999_999_999),
            ),
            ("1000000000000", 18, Err(AmountError::TooLarge)),
            (
                "99999999999999999999999999999999999999999999",
                0,
                Err(AmountError::TooLarge),
            ),
        ];
        for (text, scale, want) in table {
            let got = Amount::parse_positive(text, *scale).map(|a| a.minor());
            assert_eq!(&got, want, "parse {text:?} at scale {scale}");
        }
    }

    #[test]
    fn amounts_render_with_exactly_the_scale() {
        assert_eq!(format_minor(10000, 2), "100.00");
        assert_eq!(format_minor(5, 2), "0.05");
        assert_eq!(format_minor(-5, 2), "-0.05");
        assert_eq!(format_minor(0, 3), "0.000");
        assert_eq!(format_minor(42, 0), "42");
        assert_eq!(format_minor(-42, 0), "-42");
    }

    #[test]
    fn stored_numerics_read_back_exactly() {
        assert_eq!(parse_stored("0", 2), Ok(0));
        assert_eq!(parse_stored("12.5", 2), Ok(1250));
        assert_eq!(parse_stored("-12.50", 2), Ok(-1250));
        assert_eq!(
            parse_stored("1000000000000000000000000000000000", 2),
            Ok(100_000_000_000_000_000_000_000_000_000_000_000)
        );
        assert!(
            parse_stored("1.001", 2).is_err(),
            "more decimals than the scale"
        );
        assert!(parse_stored("x", 2).is_err());
    }

    proptest! {
        #[test]
        fn rendering_then_parsing_gives_back_the_same_minor_units(minor in 1i128..=999_999_999_999_999_999_999_999_999_999, scale in 0u8..=18) {
            let text = format_minor(minor, scale);
            prop_assert_eq!(Amount::parse_positive(&text, scale).map(|a| a.minor()), Ok(minor));
            prop_assert_eq!(parse_stored(&text, scale), Ok(minor));
        }

        #[test]
        fn parsing_never_panics(text in "\\PC{0,40}", scale in 0u8..=18) {
            let _ = Amount::parse_positive(&text, scale);
        }
    }
}
