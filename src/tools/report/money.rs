//! Exact sums and differences of amounts (i128 minor units at the larger of two scales):
//! what the balance sheet's sections and a statement's running balance are made of. A result
//! beyond i128 is an error, never a wrapped or rounded value.

use super::ReportError;
use ledger_client::Amount;

/// Zero at `scale`.
pub(super) fn zero(scale: u32) -> Amount {
    Amount::new(0, scale)
}

/// `a`'s minor units at the larger `scale` (`None`: beyond i128).
fn at_scale(a: Amount, scale: u32) -> Option<i128> {
    10i128
        .checked_pow(scale - a.scale())
        .and_then(|f| a.minor().checked_mul(f))
}

fn both(a: Amount, b: Amount) -> Option<(i128, i128, u32)> {
    let scale = a.scale().max(b.scale());
    Some((at_scale(a, scale)?, at_scale(b, scale)?, scale))
}

fn beyond(what: &str, a: Amount, b: Amount) -> ReportError {
    ReportError::new(format!(
        "{a} {what} {b} is beyond what 128 bits hold; the report cannot give it exactly"
    ))
}

/// `a + b`, exactly.
pub(super) fn add(a: Amount, b: Amount) -> Result<Amount, ReportError> {
    both(a, b)
        .and_then(|(x, y, s)| Some(Amount::new(x.checked_add(y)?, s)))
        .ok_or_else(|| beyond("+", a, b))
}

/// `a − b`, exactly.
pub(super) fn sub(a: Amount, b: Amount) -> Result<Amount, ReportError> {
    both(a, b)
        .and_then(|(x, y, s)| Some(Amount::new(x.checked_sub(y)?, s)))
        .ok_or_else(|| beyond("-", a, b))
}

/// The sum of `amounts`, exactly (zero at `scale` for none).
pub(super) fn sum(
    amounts: impl IntoIterator<Item = Amount>,
    scale: u32,
) -> Result<Amount, ReportError> {
    amounts.into_iter().try_fold(zero(scale), add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_exact_at_the_larger_scale_and_refuse_what_128_bits_cannot_hold() {
        let a = Amount::new(1250, 2);
        let b = Amount::new(5, 3);
        assert_eq!(add(a, b).unwrap().to_string(), "12.505");
        assert_eq!(sub(b, a).unwrap().to_string(), "-12.495");
        let max = 10i128.pow(36);
        assert_eq!(
            sum([Amount::new(max, 2), Amount::new(max, 2)], 2)
                .unwrap()
                .to_string(),
            "20000000000000000000000000000000000.00"
        );
        assert!(add(Amount::new(i128::MAX, 0), Amount::new(1, 0)).is_err());
        assert!(add(Amount::new(i128::MAX / 2, 0), Amount::new(1, 18)).is_err());
        assert_eq!(sum([], 2).unwrap().to_string(), "0.00");
    }
}
