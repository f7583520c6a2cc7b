//! Amounts as [`Decimal`], converted exactly to and from the ledger's decimal strings at an
//! account's scale. Nothing is ever rounded: a value the account cannot carry exactly is an
//! error before anything is sent.

use crate::error::{Error, Reason};
use rust_decimal::Decimal;

/// Digits of one leg's amount in minor units, at most (the ledger's limit MAX_AMOUNT_DIGITS).
pub const MAX_AMOUNT_DIGITS: u32 = 30;
/// Decimal places an account may carry, at most (the ledger's limit MAX_SCALE).
pub const MAX_SCALE: u32 = 18;

/// A leg's amount as the ledger takes it: a positive decimal with exactly the account's
/// `scale` decimals. `1.50` at scale 1 is `1.5` (the same value); `1.55` at scale 1, zero, a
/// negative value or one of more than [`MAX_AMOUNT_DIGITS`] digits in minor units are refused
/// with the reason the ledger would give (`AMOUNT_SCALE`, `INVALID_AMOUNT`).
pub fn to_wire(amount: Decimal, scale: u32, account: &str) -> Result<String, Error> {
    if scale > MAX_SCALE {
        return Err(Error::refused(
            Reason::AmountScale,
            format!("account {account:?} has scale {scale}, above the ledger's {MAX_SCALE} (limit MAX_SCALE)"),
        )
        .with("limit", "MAX_SCALE"));
    }
    if amount.is_sign_negative() || amount.is_zero() {
        return Err(Error::refused(
            Reason::InvalidAmount,
            format!("amount {amount} on account {account:?} must be greater than zero"),
        )
        .with("account", account));
    }
    let exact = amount.normalize();
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
        .and_then(|f| exact.mantissa().checked_mul(f))
        .filter(|m| *m < 10i128.pow(MAX_AMOUNT_DIGITS));
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

/// An amount the ledger answered (`"100.00"`, `"-0.05"`), as a [`Decimal`] with the same
/// scale. A value beyond what a `Decimal` holds exactly (28 significant digits; the ledger's
/// totals may reach 36) is an error naming it, never a rounded value.
pub fn from_wire(field: &str, text: &str) -> Result<Decimal, Error> {
    Decimal::from_str_exact(text).map_err(|e| {
        Error::new(
            crate::ErrorKind::Invalid,
            format!("the ledger answered {field} {text:?}, which a rust_decimal::Decimal cannot hold exactly: {e}"),
        )
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
    fn answered_amounts_keep_their_scale_and_values_beyond_a_decimal_are_errors() {
        assert_eq!(
            from_wire("balance", "100.00").unwrap().to_string(),
            "100.00"
        );
        assert_eq!(from_wire("balance", "-0.05").unwrap().to_string(), "-0.05");
        let e = from_wire("debits", &"9".repeat(36)).unwrap_err();
        assert!(e.message.contains("debits"), "{}", e.message);
    }
}
