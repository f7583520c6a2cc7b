//! The book side: the legs on the account of the postings that move money, as book lines in
//! the statement's sign convention.

use super::matching::BookLine;
use super::statement::minor_at;
use ledger_client::{Account, Direction, NormalBalance, Posting, PostingKind};
use time::OffsetDateTime;

/// Whether a posting of this kind moves money: a plain posting, a capture (what it captures)
/// and a void do; a hold only holds, and a release or an expiry of a hold moves nothing
/// (docs/contract.md, holds).
pub fn moves_money(kind: PostingKind) -> bool {
    match kind {
        PostingKind::Posting | PostingKind::Capture | PostingKind::Void => true,
        PostingKind::Hold | PostingKind::Release | PostingKind::Expiry => false,
    }
}

/// Adds to `out` a book line for each leg of `posting` on `account` (none if it moves no
/// money): positive when the leg raises the account's balance (a debit on a debit-normal
/// account, a credit on a credit-normal one), its reference the posting's metadata under
/// `reference_key` (trimmed; empty: none).
pub fn lines_of(
    posting: &Posting,
    account: &Account,
    reference_key: &str,
    out: &mut Vec<BookLine>,
) -> Result<(), String> {
    if !moves_money(posting.kind) {
        return Ok(());
    }
    let reference = posting
        .metadata
        .get(reference_key)
        .map_or("", |r| r.trim())
        .to_owned();
    let day = OffsetDateTime::from(posting.effective_at).date();
    let voids = match posting.kind {
        PostingKind::Void => posting.voids_posting_id.clone(),
        _ => None,
    };
    for (leg, l) in posting.legs.iter().enumerate() {
        if l.account != account.code {
            continue;
        }
        let minor = minor_at(l.amount, account.scale).map_err(|why| {
            format!(
                "the ledger answered posting {} leg {leg} with amount {}, which {why} (account {} has scale {})",
                posting.posting_id, l.amount, account.code, account.scale
            )
        })?;
        let raises = matches!(
            (l.direction, account.normal_balance),
            (Direction::Debit, NormalBalance::Debit) | (Direction::Credit, NormalBalance::Credit)
        );
        out.push(BookLine {
            posting_id: posting.posting_id.clone(),
            sequence: posting.sequence,
            leg,
            day,
            effective_at: posting.effective_at,
            amount: if raises { minor } else { -minor },
            reference: reference.clone(),
            kind: posting.kind,
            voids: voids.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger_client::{Amount, Leg};
    use std::time::{Duration, SystemTime};

    fn account(normal: NormalBalance) -> Account {
        Account {
            ledger: "default".into(),
            code: "assets:bank".into(),
            currency: "EUR".into(),
            scale: 2,
            normal_balance: normal,
            allow_negative: false,
            metadata: Default::default(),
            created_at: SystemTime::UNIX_EPOCH,
            version: 1,
            status: ledger_client::AccountStatus::Open,
            balance_floor: None,
            balance_ceiling: None,
            debit_limits: Vec::new(),
            version_info: None,
        }
    }

    fn leg(account: &str, direction: Direction, minor: i128) -> Leg {
        Leg {
            account: account.into(),
            direction,
            amount: Amount::new(minor, 2),
        }
    }

    /// A posting of `kind` on 2026-11-30T23:00:00Z, its reference `R-1`.
    fn posting(kind: PostingKind, legs: Vec<Leg>) -> Posting {
        Posting {
            ledger: "default".into(),
            posting_id: "p".into(),
            sequence: 4,
            idempotency_key: "k".into(),
            legs,
            effective_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_079_600),
            recorded_at: SystemTime::UNIX_EPOCH,
            memo: String::new(),
            metadata: [("reference".to_owned(), " R-1 ".to_owned())].into(),
            voids_posting_id: (kind == PostingKind::Void).then(|| "o".to_owned()),
            voided_by_posting_id: None,
            void_reason: None,
            caller: "c".into(),
            kind,
            hold: None,
            captures_hold_posting_id: None,
            releases_hold_posting_id: None,
            hash: None,
        }
    }

    #[test]
    fn each_leg_on_the_account_that_moves_money_is_a_line_signed_by_the_accounts_normal_side() {
        use Direction::{Credit, Debit};
        let legs = vec![
            leg("assets:bank", Debit, 1000),
            leg("equity:world", Credit, 1250),
            leg("assets:bank", Credit, -(-250)),
        ];
        let lines = |normal, kind| {
            let mut out = Vec::new();
            lines_of(
                &posting(kind, legs.clone()),
                &account(normal),
                "reference",
                &mut out,
            )
            .unwrap();
            out
        };
        let got = lines(NormalBalance::Debit, PostingKind::Posting);
        let amounts: Vec<(usize, i128)> = got.iter().map(|l| (l.leg, l.amount)).collect();
        assert_eq!(amounts, [(0, 1000), (2, -250)], "a debit raises an asset");
        assert_eq!(got[0].reference, "R-1");
        assert_eq!(got[0].day.to_string(), "2026-11-30");
        assert_eq!(got[0].voids, None);
        let got = lines(NormalBalance::Credit, PostingKind::Capture);
        let amounts: Vec<i128> = got.iter().map(|l| l.amount).collect();
        assert_eq!(amounts, [-1000, 250], "a debit lowers a liability");
        let got = lines(NormalBalance::Debit, PostingKind::Void);
        assert_eq!(got[0].voids.as_deref(), Some("o"));
        for kind in [PostingKind::Hold, PostingKind::Release, PostingKind::Expiry] {
            assert!(
                lines(NormalBalance::Debit, kind).is_empty(),
                "{kind:?} moves nothing"
            );
        }
        let mut out = Vec::new();
        lines_of(
            &posting(PostingKind::Posting, legs.clone()),
            &account(NormalBalance::Debit),
            "other",
            &mut out,
        )
        .unwrap();
        assert_eq!(out[0].reference, "", "no such metadata key: no reference");
    }
}
