use super::*;
use crate::engine::{available_of, balance_of};
use proptest::prelude::*;

#[test]
fn a_rollup_request_takes_whole_segments_and_a_bounded_depth() {
    let cases: &[(&str, u32, Option<Reason>)] = &[
        ("", 0, None),
        ("", 1, None),
        ("assets", 16, None),
        ("assets:bank", 2, None),
        ("assets:", 1, Some(Reason::InvalidField)),
        (":assets", 1, Some(Reason::InvalidField)),
        ("assets::bank", 1, Some(Reason::InvalidField)),
        ("Assets", 1, Some(Reason::InvalidAccountCode)),
        ("assets", 17, Some(Reason::LimitExceeded)),
    ];
    for &(prefix, depth, want) in cases {
        let got = RollupRequest::new(prefix, depth).err().map(|e| e.reason);
        assert_eq!(got, want, "prefix {prefix:?} depth {depth}");
    }
    let e = RollupRequest::new("assets", 17).unwrap_err();
    assert!(e.message.contains("MAX_ROLLUP_DEPTH"), "{}", e.message);
}

#[test]
fn a_prefix_covers_its_own_node_and_the_codes_beneath_it_only() {
    let r = RollupRequest::new("assets", 1).unwrap();
    for (code, covered) in [
        ("assets", true),
        ("assets:bank", true),
        ("assets:bank:eur", true),
        ("assets2", false),
        ("assets-x:bank", false),
        ("asset", false),
        ("liabilities:assets", false),
    ] {
        assert_eq!(r.covers(code), covered, "{code}");
    }
    assert!(RollupRequest::new("", 0).unwrap().covers("anything:at:all"));
}

#[test]
fn a_node_is_cut_to_whole_segments_and_ordered_as_a_tree() {
    assert_eq!(cut("a:b:c", 0), "");
    assert_eq!(cut("a:b:c", 1), "a");
    assert_eq!(cut("a:b:c", 2), "a:b");
    assert_eq!(cut("a:b:c", 3), "a:b:c");
    assert_eq!(cut("a:b:c", 9), "a:b:c");
    assert_eq!(segments(""), 0);
    assert_eq!(segments("a:b"), 2);
    let mut nodes = vec![
        "assets-2",
        "assets:bank",
        "",
        "assets",
        "assets:bank:eur",
        "assets:a",
    ];
    nodes.sort_by(|a, b| tree_order(a, b));
    assert_eq!(
        nodes,
        [
            "",
            "assets",
            "assets:a",
            "assets:bank",
            "assets:bank:eur",
            "assets-2"
        ]
    );
}

fn group(node: &str, normal: NormalBalance, [d, c, hd, hc]: [i128; 4]) -> Group {
    Group {
        node: node.into(),
        currency: "EUR".into(),
        scale: 2,
        normal,
        accounts: 1,
        debits: d,
        credits: c,
        held_debits: hd,
        held_credits: hc,
    }
}

#[test]
fn each_group_counts_in_its_node_and_every_ancestor_down_to_the_prefix() {
    let r = RollupRequest::new("assets", 1).unwrap();
    let groups = [
        group("assets:bank", NormalBalance::Debit, [100, 30, 0, 5]),
        group("assets:cash", NormalBalance::Debit, [10, 0, 0, 0]),
        group("assets", NormalBalance::Credit, [0, 7, 2, 0]),
    ];
    let out = roll_up(&r, &groups).unwrap();
    let nodes: Vec<_> = out
        .iter()
        .map(|n| (n.node.as_str(), n.account_count))
        .collect();
    assert_eq!(
        nodes,
        [("assets", 3), ("assets:bank", 1), ("assets:cash", 1)]
    );
    let top = &out[0].totals[0];
    assert_eq!((top.debits, top.credits), (110, 37));
    // 70 + 10 (debit-normal) + 7 (credit-normal, its own direction)
    assert_eq!(top.balance, 87);
    // 70 - 5 + 10 + (7 - 2)
    assert_eq!(top.available, 80);
    assert_eq!((top.held_debits, top.held_credits), (2, 5));
    assert_eq!(after(&out, Some("assets")).len(), 2);
    assert_eq!(after(&out, Some("assets:bank")).len(), 1);
    assert_eq!(after(&out, Some("assets:cash")).len(), 0);
    assert_eq!(after(&out, None).len(), 3);
}

#[test]
fn sums_past_128_bits_are_refused_naming_the_limit_not_wrapped() {
    let r = RollupRequest::new("", 1).unwrap();
    let big = [i128::MAX, 0, 0, 0];
    let groups = [
        group("a", NormalBalance::Debit, big),
        group("b", NormalBalance::Debit, big),
    ];
    let e = roll_up(&r, &groups).unwrap_err();
    assert!(e.message.contains("MAX_SUM_MINOR"), "{}", e.message);
    let lowering = [0, i128::MAX, 0, i128::MAX];
    let e = roll_up(&r, &[group("a", NormalBalance::Debit, lowering)]).unwrap_err();
    assert!(e.message.contains("MAX_SUM_MINOR"), "{}", e.message);
}

/// Accounts: a code of up to three segments from a small alphabet, a side, a currency, sums.
fn accounts() -> impl Strategy<Value = Vec<(String, bool, bool, [i128; 4])>> {
    let code = prop::collection::vec(prop::sample::select(vec!["a", "b", "a-b", "c"]), 1..=3)
        .prop_map(|s| s.join(":"));
    let sums = prop::array::uniform4(0i128..1_000_000);
    prop::collection::vec((code, any::<bool>(), any::<bool>(), sums), 0..40)
}

proptest! {
    /// The rollup of any nodes equals, node by node, the sums of the accounts beneath each
    /// (with `engine`'s balance and available of each account), grouped as storage groups.
    #[test]
    fn a_rollup_equals_the_sums_of_the_accounts_beneath_each_node(
        list in accounts(), prefix in prop::sample::select(vec!["", "a", "a:b", "c"]), depth in 0u32..4
    ) {
        let r = RollupRequest::new(prefix, depth).unwrap();
        let normal = |d: bool| if d { NormalBalance::Debit } else { NormalBalance::Credit };
        let currency = |u: bool| if u { "USD" } else { "EUR" };
        let groups: Vec<Group> = list.iter().filter(|a| r.covers(&a.0)).map(|(code, d, u, s)| Group {
            currency: currency(*u).into(),
            ..group(cut(code, r.levels()), normal(*d), *s)
        }).collect();
        let out = roll_up(&r, &groups).unwrap();
        for n in &out {
            let beneath: Vec<_> = list.iter().filter(|a| RollupRequest::new(&n.node, 0).unwrap().covers(&a.0)).collect();
            prop_assert_eq!(n.account_count, beneath.len() as u64);
            for t in &n.totals {
                let mine = beneath.iter().filter(|a| currency(a.2) == t.currency);
                let mut want = [0i128; 6];
                for (_, d, _, [dr, cr, hd, hc]) in mine {
                    let k = normal(*d);
                    for (w, v) in want.iter_mut().zip([*dr, *cr, *hd, *hc, balance_of(k, *dr, *cr), available_of(k, *dr, *cr, *hd, *hc)]) {
                        *w += v;
                    }
                }
                prop_assert_eq!([t.debits, t.credits, t.held_debits, t.held_credits, t.balance, t.available], want);
            }
        }
        // Every node of the request beneath which an account lies is there, once, in tree order.
        let mut want: Vec<String> = list.iter().filter(|a| r.covers(&a.0))
            .flat_map(|a| (r.prefix_levels()..=segments(cut(&a.0, r.levels()))).map(|l| cut(&a.0, l).to_owned()).collect::<Vec<_>>())
            .collect();
        want.sort_by(|a, b| tree_order(a, b));
        want.dedup();
        let got: Vec<String> = out.iter().map(|n| n.node.clone()).collect();
        prop_assert_eq!(got, want);
    }
}
