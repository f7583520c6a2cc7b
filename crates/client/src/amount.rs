//! Amounts, exactly: [`Amount`], a count of minor units at a scale as the ledger itself holds
//! them (its totals reach 10^36 minor units, beyond what a [`Decimal`] holds), converted to
//! and from the ledger's decimal strings without rounding, and to a [`Decimal`] where one
//! holds the value. A value an account cannot carry exactly is an error before anything is
//! sent.

use crate::error::{Error, ErrorKind, Reason};
use rust_decimal::Decimal;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// Digits of one leg's amount in minor units, at most (the ledger's limit MAX_AMOUNT_DIGITS).
pub const MAX_AMOUNT_DIGITS: u32 = 30;
/// Decimal places an account may carry, at most (the ledger's limit MAX_SCALE).
pub const MAX_SCALE: u32 = 18;

/// An exact decimal amount: `minor` units of its last decimal place at `scale` (`1250` at
/// scale 2 is `12.50`), in 128 bits like the ledger's own (±1.7·10^38), so every amount the
/// ledger answers is one: balances, totals, statement entries and legs.
///
/// - [`Amount::exact`] (and `Display`) writes it exactly, with its scale (`"12.50"`);
/// - [`Amount::decimal`] gives it as a [`Decimal`] with the same scale when a `Decimal` holds
///   it (at most [`Decimal::MAX`] units of its last place, 28 or 29 digits), and otherwise an
///   error of kind [`ErrorKind::BeyondDecimal`] saying so: never a rounded value;
/// - [`Amount::minor`] and [`Amount::scale`] give the parts, for exact arithmetic in `i128`.
///
/// Legs take any `Into<Amount>`: a [`Decimal`], or an `Amount` (parsed from a string, or made
/// of minor units), which also carries the 30-digit amounts a `Decimal` cannot. Amounts
/// compare by value (`12.5` equals `12.50`), with each other and with a `Decimal`.
#[derive(Clone, Copy)]
pub struct Amount {
    minor: i128,
    scale: u32,
}

impl Amount {
    /// `minor` units of the `scale`-th decimal place (`Amount::new(1250, 2)` is `12.50`).
    pub const fn new(minor: i128, scale: u32) -> Amount {
        Amount { minor, scale }
    }

    /// The value in units of its last decimal place (`12.50`: `1250`).
    pub const fn minor(&self) -> i128 {
        self.minor
    }

    /// Its decimal places (`12.50`: `2`; an answered amount has its account's scale).
    pub const fn scale(&self) -> u32 {
        self.scale
    }

    /// The exact decimal string, with exactly its scale (`"12.50"`, `"-0.05"`,
    /// `"1000000000000000000000000000.00"`), as the ledger writes it; the same as `Display`.
    pub fn exact(&self) -> String {
        self.to_string()
    }

    /// The amount as a [`Decimal`] with the same scale, when one holds it exactly: at most
    /// [`Decimal::MAX`] (79228162514264337593543950335) units of its last decimal place and
    /// at most 28 places. Otherwise an error of kind [`ErrorKind::BeyondDecimal`] naming the
    /// value (metadata `amount`) and the limit (`limit` = `Decimal::MAX`): never rounded.
    pub fn decimal(&self) -> Result<Decimal, Error> {
        Decimal::try_from_i128_with_scale(self.minor, self.scale).map_err(|_| {
            let why = if self.scale > Decimal::MAX_SCALE {
                format!("{} decimal places, more than its {}", self.scale, Decimal::MAX_SCALE)
            } else {
                format!(
                    "{} units of its last decimal place, more than its {} (Decimal::MAX)",
                    self.minor.unsigned_abs(),
                    Decimal::MAX.mantissa()
                )
            };
            Error::new(
                ErrorKind::BeyondDecimal,
                format!(
                    "amount {self} does not fit a rust_decimal::Decimal exactly ({why}); Amount::exact or Amount::minor give it exactly"
                ),
            )
            .with("amount", self.exact())
            .with("limit", "Decimal::MAX")
        })
    }

    /// The same value with no trailing zero decimals (`12.50` is `12.5`, `0.00` is `0`).
    fn normalized(self) -> Amount {
        let (mut minor, mut scale) = (self.minor, self.scale);
        while scale > 0 && minor % 10 == 0 {
            minor /= 10;
            scale -= 1;
        }
        Amount { minor, scale }
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&format_minor(self.minor, self.scale))
    }
}

impl fmt::Debug for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Amount({self})")
    }
}

impl PartialEq for Amount {
    fn eq(&self, other: &Amount) -> bool {
        let (a, b) = (self.normalized(), other.normalized());
        (a.minor, a.scale) == (b.minor, b.scale)
    }
}

impl Eq for Amount {}

impl Hash for Amount {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let n = self.normalized();
        (n.minor, n.scale).hash(state);
    }
}

impl PartialEq<Decimal> for Amount {
    fn eq(&self, other: &Decimal) -> bool {
        *self == Amount::from(*other)
    }
}

impl PartialEq<Amount> for Decimal {
    fn eq(&self, other: &Amount) -> bool {
        other == self
    }
}

impl From<Decimal> for Amount {
    /// The same value and scale (every `Decimal` is an exact `Amount`).
    fn from(d: Decimal) -> Amount {
        Amount::new(d.mantissa(), d.scale())
    }
}

impl FromStr for Amount {
    type Err = Error;

    /// Parses `digits[.digits]` (a leading `-` for a negative value) exactly, keeping its
    /// scale (`"12.50"` has scale 2); anything else, or more digits than 128-bit minor units
    /// hold, is refused as `INVALID_AMOUNT`.
    fn from_str(text: &str) -> Result<Amount, Error> {
        parse(text).map_err(|why| {
            Error::refused(Reason::InvalidAmount, format!("amount {text:?} is {why}"))
        })
    }
}

/// `-?digits(.digits)?` as minor units at the number of decimals given, or why not.
fn parse(text: &str) -> Result<Amount, &'static str> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let dotted = unsigned.len() > int.len();
    if int.is_empty() || (dotted && frac.is_empty()) || !digits(int) || !digits(frac) {
        return Err(
            "not a decimal number (digits, optionally '.' and more digits, after an optional '-')",
        );
    }
    let scale = u32::try_from(frac.len()).map_err(|_| "too many decimal places")?;
    let mut minor: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        minor = minor
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(b - b'0')))
            .ok_or("more digits than 128-bit minor units hold")?;
    }
    Ok(Amount::new(if negative { -minor } else { minor }, scale))
}

/// A leg's amount as the ledger takes it: a positive decimal with exactly the account's
/// `scale` decimals. `1.50` at scale 1 is `1.5` (the same value); `1.55` at scale 1, zero, a
/// negative value or one of more than [`MAX_AMOUNT_DIGITS`] digits in minor units are refused
/// with the reason the ledger would give (`AMOUNT_SCALE`, `INVALID_AMOUNT`).
pub fn to_wire(amount: impl Into<Amount>, scale: u32, account: &str) -> Result<String, Error> {
    at_scale(amount.into(), scale, account, true)
}

/// A signed amount as the ledger takes it (a balance floor or ceiling, a condition's
/// `available_at_least`): zero or a decimal of either sign with exactly the account's `scale`
/// decimals (`-500` at scale 2 is `"-500.00"`, an overdraft of 500). Refused as [`to_wire`]
/// refuses, but for the sign: more decimals than the scale (`AMOUNT_SCALE`, never rounded) or
/// more than [`MAX_AMOUNT_DIGITS`] digits in minor units (`INVALID_AMOUNT`).
pub fn to_wire_signed(
    amount: impl Into<Amount>,
    scale: u32,
    account: &str,
) -> Result<String, Error> {
    at_scale(amount.into(), scale, account, false)
}

/// `amount` written with exactly `scale` decimals, or the reason the ledger would refuse it
/// for (`positive`: a leg's amount, greater than zero).
fn at_scale(amount: Amount, scale: u32, account: &str, positive: bool) -> Result<String, Error> {
    if scale > MAX_SCALE {
        return Err(Error::refused(
            Reason::AmountScale,
            format!("account {account:?} has scale {scale}, above the ledger's {MAX_SCALE} (limit MAX_SCALE)"),
        )
        .with("limit", "MAX_SCALE"));
    }
    if positive && amount.minor() <= 0 {
        return Err(Error::refused(
            Reason::InvalidAmount,
            format!("amount {amount} on account {account:?} must be greater than zero"),
        )
        .with("account", account));
    }
    let exact = amount.normalized();
    if exact.scale() > scale {
        return Err(Error::refused(
            Reason::AmountScale,
            format!(
                "amount {amount} has {} decimal places but account {account:?} carries {scale}; refused, never rounded",
                exact.scale()
            ),
        )
        .with("account", account));
    }
    let minor = 10i128
        .checked_pow(scale - exact.scale())
        .and_then(|f| exact.minor().checked_mul(f))
        .filter(|m| m.unsigned_abs() < 10u128.pow(MAX_AMOUNT_DIGITS));
    let Some(minor) = minor else {
        return Err(Error::refused(
            Reason::InvalidAmount,
            format!(
                "amount {amount} at account {account:?}'s scale {scale} has more than {MAX_AMOUNT_DIGITS} digits (limit MAX_AMOUNT_DIGITS)"
            ),
        )
        .with("account", account)
        .with("limit", "MAX_AMOUNT_DIGITS"));
    };
    Ok(format_minor(minor, scale))
}

/// Minor units written with exactly `scale` decimals (`12345, 2` is `123.45`).
fn format_minor(minor: i128, scale: u32) -> String {
    let digits = minor.unsigned_abs().to_string();
    let sign = if minor < 0 { "-" } else { "" };
    let scale = scale as usize;
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

/// An amount the ledger answered (`"100.00"`, `"-0.05"`, up to its totals' 10^36 minor
/// units), exactly, with the same scale. Text that is no decimal number is an error naming
/// `field`, never a guessed value.
pub fn from_wire(field: &str, text: &str) -> Result<Amount, Error> {
    parse(text).map_err(|why| {
        Error::new(
            ErrorKind::Invalid,
            format!("the ledger answered {field} {text:?}, which is {why}"),
        )
        .with("field", field)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    #[test]
    fn amounts_are_written_with_exactly_the_accounts_scale() {
        assert_eq!(to_wire(d("12.5"), 2, "a").unwrap(), "12.50");
        assert_eq!(to_wire(d("1.50"), 1, "a").unwrap(), "1.5");
        assert_eq!(to_wire(d("0.05"), 2, "a").unwrap(), "0.05");
        assert_eq!(to_wire(d("7"), 0, "a").unwrap(), "7");
        assert_eq!(to_wire(d("7.000"), 0, "a").unwrap(), "7");
        assert_eq!(
            to_wire(d("0.000000000000000001"), 18, "a").unwrap(),
            "0.000000000000000001"
        );
        assert_eq!(
            to_wire(d("9999999999.999999999999999999"), 18, "a").unwrap(),
            "9999999999.999999999999999999"
        );
    }

    #[test]
    fn more_decimals_than_the_scale_zero_negative_and_too_many_digits_are_refused_by_reason() {
        let e = to_wire(d("1.005"), 2, "acct:1").unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Refused(Reason::AmountScale));
        assert!(e.message.contains("3 decimal places"), "{}", e.message);
        assert!(e.message.contains("never rounded"), "{}", e.message);
        assert_eq!(e.metadata["account"], "acct:1");
        for bad in ["0", "-1", "-0.01"] {
            let e = to_wire(d(bad), 2, "a").unwrap_err();
            assert_eq!(e.reason(), Some(Reason::InvalidAmount), "{bad}");
        }
        // 13 integer digits at scale 18: 31 digits in minor units.
        let e = to_wire(d("1000000000000"), 18, "a").unwrap_err();
        assert_eq!(e.reason(), Some(Reason::InvalidAmount));
        assert_eq!(e.metadata["limit"], "MAX_AMOUNT_DIGITS");
        assert!(e.message.contains("MAX_AMOUNT_DIGITS"));
        // The largest Decimal at scale 18 overflows the arithmetic: refused the same way.
        let e = to_wire(Decimal::MAX, 18, "a").unwrap_err();
        assert_eq!(e.metadata["limit"], "MAX_AMOUNT_DIGITS");
        assert!(!e.is_retry_safe());
    }

    #[test]
    fn answered_amounts_read_back_exactly_up_to_the_ledgers_totals_and_beyond_a_decimal() {
        // 10^36 minor units (MAX_TOTAL_MINOR) at scales 0, 2 and 18, and their negatives.
        for text in [
            "1000000000000000000000000000000000000",
            "10000000000000000000000000000000000.00",
            "1000000000000000000.000000000000000000",
            "-10000000000000000000000000000000000.00",
            "100.00",
            "-0.05",
            "0.00",
            "0",
        ] {
            let a = from_wire("balance", text).unwrap();
            assert_eq!(a.exact(), text);
            assert_eq!(a.to_string(), text);
            assert_eq!(Amount::from_str(text).unwrap(), a, "{text}");
        }
        let a = from_wire("debits", "10000000000000000000000000000000000.00").unwrap();
        assert_eq!((a.minor(), a.scale()), (10i128.pow(36), 2));
        assert_eq!(
            from_wire("x", "100.00")
                .unwrap()
                .decimal()
                .unwrap()
                .to_string(),
            "100.00"
        );
        for bad in ["", "-", "1.", ".5", "+1", "1e5", " 1", "1,00", "--1"] {
            let e = from_wire("held_debits", bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Invalid, "{bad:?}");
            assert_eq!(e.metadata["field"], "held_debits", "{bad:?}");
            assert!(e.message.contains("held_debits"), "{}", e.message);
            let e = Amount::from_str(bad).unwrap_err();
            assert_eq!(e.reason(), Some(Reason::InvalidAmount), "{bad:?}");
        }
        let e = from_wire("credits", &"9".repeat(40)).unwrap_err();
        assert!(e.message.contains("128-bit"), "{}", e.message);
    }

    #[test]
    fn an_amount_beyond_a_decimal_is_a_precise_error_and_one_within_keeps_its_scale() {
        let big = Amount::from_str("1000000000000000000000000000.00").unwrap();
        let e = big.decimal().unwrap_err();
        assert_eq!(e.kind, ErrorKind::BeyondDecimal);
        assert_eq!(e.metadata["amount"], "1000000000000000000000000000.00");
        assert_eq!(e.metadata["limit"], "Decimal::MAX");
        assert!(
            e.message
                .contains("amount 1000000000000000000000000000.00 does not fit")
                && e.message.contains("79228162514264337593543950335")
                && e.message.contains("Amount::exact"),
            "{}",
            e.message
        );
        assert!(!e.is_retry_safe());
        // The largest Decimal at each end, and one unit beyond it.
        let max = Amount::from(Decimal::MAX);
        assert_eq!(max.decimal().unwrap(), Decimal::MAX);
        assert!(Amount::new(max.minor() + 1, 0).decimal().is_err());
        let min = Amount::new(-max.minor(), 2).decimal().unwrap();
        assert_eq!(min.to_string(), "-792281625142643375935439503.35");
        let d = Amount::new(1250, 2).decimal().unwrap();
        assert_eq!((d.to_string(), d.scale()), ("12.50".to_string(), 2));
        let fine = Amount::new(1, 29).decimal().unwrap_err();
        assert!(
            fine.message.contains("29 decimal places"),
            "{}",
            fine.message
        );
    }

    #[test]
    fn amounts_compare_by_value_with_each_other_and_with_decimals() {
        assert_eq!(Amount::new(125, 1), Amount::new(1250, 2));
        assert_eq!(Amount::new(0, 2), Amount::new(0, 0));
        assert_ne!(Amount::new(125, 1), Amount::new(125, 2));
        assert_eq!(Amount::new(1250, 2), d("12.5"));
        assert_eq!(d("12.500"), Amount::new(125, 1));
        let set: std::collections::HashSet<Amount> =
            [Amount::new(125, 1), Amount::new(1250, 2)].into();
        assert_eq!(set.len(), 1);
        // Values a Decimal cannot hold differ by one minor unit: still told apart.
        let total = Amount::new(10i128.pow(36), 2);
        assert_ne!(total, Amount::new(10i128.pow(36) - 1, 2));
        assert_eq!(
            format!("{:>8}|{:?}", Amount::new(-5, 2), Amount::new(5, 0)),
            "   -0.05|Amount(5)"
        );
    }

    #[test]
    fn amounts_beyond_a_decimal_are_sent_exactly_at_the_accounts_scale() {
        let a = Amount::from_str("900000000000000000000000000").unwrap();
        assert_eq!(
            to_wire(a, 2, "a").unwrap(),
            "900000000000000000000000000.00"
        );
        let thirty = Amount::from_str(&"9".repeat(30)).unwrap();
        assert_eq!(to_wire(thirty, 0, "a").unwrap(), "9".repeat(30));
        let e = to_wire(thirty, 1, "a").unwrap_err();
        assert_eq!(e.metadata["limit"], "MAX_AMOUNT_DIGITS");
        assert_eq!(to_wire(Amount::new(12500, 3), 2, "a").unwrap(), "12.50");
    }

    #[test]
    fn signed_amounts_read_back_and_are_written_exactly_at_the_accounts_scale() {
        // A floor of "-500.00" (an overdraft of 500) round-trips exactly, text and value.
        let floor = from_wire("balance_floor", "-500.00").unwrap();
        assert_eq!((floor.minor(), floor.scale()), (-50000, 2));
        assert_eq!(floor.exact(), "-500.00");
        assert_eq!(to_wire_signed(floor, 2, "a").unwrap(), "-500.00");
        assert_eq!(Amount::from_str("-500.00").unwrap(), floor);
        assert_eq!(floor.decimal().unwrap(), d("-500.00"));
        assert_eq!(Amount::from(d("-500")), floor, "by value");
        for (amount, scale, wire) in [
            (Amount::from(d("-500")), 2, "-500.00"),
            (Amount::new(-5, 0), 2, "-5.00"),
            (Amount::from(d("-0.05")), 2, "-0.05"),
            (Amount::from(d("-1.50")), 1, "-1.5"),
            (Amount::new(0, 0), 2, "0.00"),
            (Amount::new(0, 5), 0, "0"),
            (Amount::from(d("1000")), 0, "1000"),
        ] {
            let text = to_wire_signed(amount, scale, "a").unwrap();
            assert_eq!(text, wire, "{amount:?} at {scale}");
            assert_eq!(from_wire("x", &text).unwrap(), amount, "{text}");
        }
        // The most negative amount a leg's digits allow: 30 nines.
        let low = Amount::new(-(10i128.pow(30) - 1), 0);
        let text = to_wire_signed(low, 0, "a").unwrap();
        assert_eq!(text, format!("-{}", "9".repeat(30)));
        assert_eq!(from_wire("x", &text).unwrap(), low);
    }

    #[test]
    fn signed_amounts_are_refused_for_scale_and_digits_but_not_for_their_sign() {
        let e = to_wire_signed(d("-1.005"), 2, "wallet:a").unwrap_err();
        assert_eq!(e.kind, ErrorKind::Refused(Reason::AmountScale));
        assert_eq!(e.metadata["account"], "wallet:a");
        assert!(e.message.contains("never rounded"), "{e}");
        // 31 digits in minor units, negative or not.
        for minor in [10i128.pow(30), -(10i128.pow(30))] {
            let e = to_wire_signed(Amount::new(minor, 0), 0, "a").unwrap_err();
            assert_eq!(e.reason(), Some(Reason::InvalidAmount));
            assert_eq!(e.metadata["limit"], "MAX_AMOUNT_DIGITS");
        }
        let e = to_wire_signed(Amount::new(-1, 0), 19, "a").unwrap_err();
        assert_eq!(e.metadata["limit"], "MAX_SCALE");
        assert!(!e.is_retry_safe());
        // A leg's amount stays positive.
        assert_eq!(
            to_wire(d("-500"), 2, "a").unwrap_err().reason(),
            Some(Reason::InvalidAmount)
        );
        assert_eq!(
            to_wire(d("0"), 2, "a").unwrap_err().reason(),
            Some(Reason::InvalidAmount)
        );
    }
}
