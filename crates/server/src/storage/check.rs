//! `ledger check`: the journal's invariants, verified on a live database by SQL. Each check
//! counts violations and shows a few examples; the report is read by operators.

use super::StorageError;

/// One invariant and what was found.
#[derive(Debug, Clone)]
pub struct Finding {
    pub name: &'static str,
    pub violations: i64,
    pub examples: Vec<String>,
}

/// Invariants as (name, SQL returning one text column per violating example). Each query
/// lists violations; at most [`MAX_EXAMPLES`] are shown.
const CHECKS: &[(&str, &str)] = &[
    (
        "every posting balances per currency (holds and releases too)",
        "SELECT format('posting %s %s: debits %s credits %s', e.sequence, a.currency,
                sum(e.amount) FILTER (WHERE e.direction = 'D'), sum(e.amount) FILTER (WHERE e.direction = 'C'))
         FROM ALL_LEGS e JOIN accounts a USING (account_id)
         GROUP BY e.sequence, a.currency
         HAVING coalesce(sum(e.amount) FILTER (WHERE e.direction = 'D'), 0)
             <> coalesce(sum(e.amount) FILTER (WHERE e.direction = 'C'), 0)",
    ),
    (
        "every posting has at least two legs, numbered from 0",
        "SELECT format('posting %s has %s legs (max index %s)', p.sequence, count(e.leg_index), max(e.leg_index))
         FROM postings p LEFT JOIN ALL_LEGS e USING (sequence)
         GROUP BY p.sequence
         HAVING count(e.leg_index) < 2 OR max(e.leg_index) <> count(e.leg_index) - 1",
    ),
    (
        "debits equal credits per currency over the whole journal",
        "SELECT format('%s: debits %s credits %s', a.currency,
                sum(e.amount) FILTER (WHERE e.direction = 'D'), sum(e.amount) FILTER (WHERE e.direction = 'C'))
         FROM entries e JOIN accounts a USING (account_id)
         GROUP BY a.currency
         HAVING coalesce(sum(e.amount) FILTER (WHERE e.direction = 'D'), 0)
             <> coalesce(sum(e.amount) FILTER (WHERE e.direction = 'C'), 0)",
    ),
    (
        "stored account totals equal the sums of their legs",
        "SELECT format('account %s: stored debits %s credits %s version %s, legs say %s %s %s', a.code,
                t.debits, t.credits, t.version, s.d, s.c, s.n)
         FROM account_totals t JOIN accounts a USING (account_id)
         CROSS JOIN LATERAL (
           SELECT coalesce(sum(amount) FILTER (WHERE direction = 'D'), 0) AS d,
                  coalesce(sum(amount) FILTER (WHERE direction = 'C'), 0) AS c,
                  count(*) AS n
           FROM entries e WHERE e.account_id = t.account_id) s
         WHERE t.debits <> s.d OR t.credits <> s.c OR t.version <> s.n",
    ),
    (
        "every account has a totals row",
        "SELECT format('account %s has no totals row', a.code)
         FROM accounts a LEFT JOIN account_totals t USING (account_id) WHERE t.account_id IS NULL",
    ),
    (
        "running totals after each leg chain consistently (versions 1, 2, 3 … in sequence order)",
        "SELECT format('account %s version %s (posting %s): stored after %s/%s, running %s/%s, expected version %s', a.code,
                x.account_version, x.sequence, x.debits_after, x.credits_after, x.rd, x.rc, x.rn)
         FROM (
           SELECT e.*, sum(CASE WHEN direction = 'D' THEN amount ELSE 0 END) OVER w AS rd,
                  sum(CASE WHEN direction = 'C' THEN amount ELSE 0 END) OVER w AS rc,
                  row_number() OVER w AS rn
           FROM entries e
           WINDOW w AS (PARTITION BY account_id ORDER BY sequence, leg_index ROWS UNBOUNDED PRECEDING)) x
         JOIN accounts a USING (account_id)
         WHERE x.debits_after <> x.rd OR x.credits_after <> x.rc OR x.account_version <> x.rn",
    ),
    (
        "each ledger's sequence is gapless from 1 and matches its state",
        "SELECT format('ledger %s: %s postings, sequences %s..%s; ledger_state.last_sequence %s (of ledger %s)', l.code,
                coalesce(c.n, 0), coalesce(c.lo, 1), coalesce(c.hi, 0), s.last_sequence & 1099511627775, s.last_sequence >> 40)
         FROM ledgers l LEFT JOIN ledger_state s USING (ledger_id)
         LEFT JOIN (SELECT ledger_id, count(*) AS n, min(sequence & 1099511627775) AS lo,
                           max(sequence & 1099511627775) AS hi
                    FROM postings GROUP BY ledger_id) c USING (ledger_id)
         WHERE s.ledger_id IS NULL OR coalesce(c.lo, 1) <> 1 OR coalesce(c.hi, 0) <> coalesce(c.n, 0)
            OR s.last_sequence <> (l.ledger_id::bigint << 40) + coalesce(c.hi, 0)
         UNION ALL
         SELECT format('%s postings of ledger id %s, which does not exist', count(*), p.ledger_id)
         FROM postings p WHERE NOT EXISTS (SELECT 1 FROM ledgers l WHERE l.ledger_id = p.ledger_id)
         GROUP BY p.ledger_id",
    ),
    (
        "recorded_at strictly increases with sequence, and legs carry their posting's times",
        "SELECT format('posting %s recorded %s, previous %s', sequence, recorded_at, prev)
         FROM (SELECT sequence, recorded_at, lag(recorded_at) OVER (PARTITION BY ledger_id ORDER BY sequence) AS prev
               FROM postings) x
         WHERE prev >= recorded_at
         UNION ALL
         SELECT format('posting %s leg %s has times %s/%s, posting %s/%s', p.sequence, e.leg_index, e.recorded_at, e.effective_at, p.recorded_at, p.effective_at)
         FROM entries e JOIN postings p USING (sequence)
         WHERE e.recorded_at <> p.recorded_at OR e.effective_at <> p.effective_at",
    ),
    (
        "each void reverses an existing posting that is not itself a void",
        "SELECT format('void %s of %s: %s', v.posting_id, v.voids_posting_id,
                CASE WHEN t.posting_id IS NULL THEN 'target missing' ELSE 'target is a void' END)
         FROM postings v LEFT JOIN postings t ON t.posting_id = v.voids_posting_id
         WHERE v.voids_posting_id IS NOT NULL AND (t.posting_id IS NULL OR t.voids_posting_id IS NOT NULL)
         UNION ALL
         SELECT format('void %s leg %s does not mirror leg %s of %s', v.posting_id, ve.leg_index, te.leg_index, t.posting_id)
         FROM postings v JOIN postings t ON t.posting_id = v.voids_posting_id
         JOIN ALL_LEGS ve ON ve.sequence = v.sequence
         LEFT JOIN ALL_LEGS te ON te.sequence = t.sequence AND te.leg_index = ve.leg_index
         WHERE te.leg_index IS NULL OR te.account_id <> ve.account_id OR te.amount <> ve.amount OR te.direction = ve.direction",
    ),
    (
        "every leg, outbox row, posting and rejection refers to an existing parent",
        "SELECT format('leg (%s, %s) names missing posting or account %s', e.sequence, e.leg_index, e.account_id)
         FROM ALL_LEGS e
         WHERE NOT EXISTS (SELECT 1 FROM postings p WHERE p.sequence = e.sequence)
            OR NOT EXISTS (SELECT 1 FROM accounts a WHERE a.account_id = e.account_id)
         UNION ALL
         SELECT format('outbox row %s has no posting', o.sequence)
         FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM postings p WHERE p.sequence = o.sequence)
         UNION ALL
         SELECT format('posting %s has no claimed key (%s, %s) numbered %s', p.sequence, p.caller, p.idempotency_key, p.key_id)
         FROM postings p WHERE NOT EXISTS (
           SELECT 1 FROM idempotency_keys k
           WHERE k.key_id = p.key_id AND k.ledger_id = p.ledger_id AND k.caller = p.caller
             AND k.idempotency_key = p.idempotency_key)
         UNION ALL
         SELECT format('rejection of (%s, %s) in ledger id %s has no claimed key', r.caller, r.idempotency_key, r.ledger_id)
         FROM rejections r WHERE NOT EXISTS (
           SELECT 1 FROM idempotency_keys k
           WHERE k.ledger_id = r.ledger_id AND k.caller = r.caller AND k.idempotency_key = r.idempotency_key)",
    ),
    (
        "nothing crosses ledgers: a posting's legs, void and hold are of its own ledger",
        "SELECT format('posting %s of ledger id %s: leg %s is on account %s of ledger id %s', e.sequence & 1099511627775,
                e.sequence >> 40, e.leg_index, a.code, a.ledger_id)
         FROM ALL_LEGS e JOIN accounts a USING (account_id) WHERE a.ledger_id <> (e.sequence >> 40)
         UNION ALL
         SELECT format('posting %s of ledger id %s voids or closes %s of ledger id %s', p.sequence & 1099511627775,
                p.ledger_id, t.posting_id, t.ledger_id)
         FROM postings p JOIN postings t ON t.posting_id IN (p.voids_posting_id, p.closes_hold_posting_id)
         WHERE t.ledger_id <> p.ledger_id",
    ),
    (
        "no posting is voided twice",
        "SELECT format('posting %s voided %s times', voids_posting_id, count(*))
         FROM postings WHERE voids_posting_id IS NOT NULL GROUP BY voids_posting_id HAVING count(*) > 1",
    ),
    (
        "every decided key has exactly one outcome (a posting, an account version or a rejection)",
        "SELECT format('key (%s, %s): %s postings, %s account versions, %s rejections', k.caller, k.idempotency_key,
                (SELECT count(*) FROM postings p WHERE p.key_id = k.key_id),
                (SELECT count(*) FROM account_terms v WHERE v.key_id = k.key_id),
                (SELECT count(*) FROM rejections r WHERE r.ledger_id = k.ledger_id AND r.caller = k.caller AND r.idempotency_key = k.idempotency_key))
         FROM idempotency_keys k
         WHERE (SELECT count(*) FROM postings p WHERE p.key_id = k.key_id)
             + (SELECT count(*) FROM account_terms v WHERE v.key_id = k.key_id)
             + (SELECT count(*) FROM rejections r
                WHERE r.ledger_id = k.ledger_id AND r.caller = k.caller AND r.idempotency_key = k.idempotency_key) <> 1",
    ),
    (
        "every posting has exactly one event (pending in the outbox or already delivered)",
        "SELECT format('posting %s has no event', p.sequence)
         FROM postings p
         WHERE NOT EXISTS (SELECT 1 FROM outbox o WHERE o.sequence = p.sequence)
           AND p.sequence > public.ledger_published_sequence(p.ledger_id)
         UNION ALL
         SELECT format('outbox row %s names posting %s but the posting is %s', o.sequence, o.posting_id, p.posting_id)
         FROM outbox o JOIN postings p USING (sequence) WHERE o.posting_id <> p.posting_id",
    ),
    (
        "a posting's legs move money (entries) or move none (hold_legs: holds and releases), never both",
        "SELECT format('posting %s (hold %s, closes %s) has %s entries and %s held legs', p.sequence, p.hold, coalesce(p.close_kind, '-'),
                (SELECT count(*) FROM entries e WHERE e.sequence = p.sequence),
                (SELECT count(*) FROM hold_legs h WHERE h.sequence = p.sequence))
         FROM postings p
         WHERE CASE WHEN p.hold OR p.close_kind IN ('release', 'expire')
                    THEN EXISTS (SELECT 1 FROM entries e WHERE e.sequence = p.sequence)
                    ELSE EXISTS (SELECT 1 FROM hold_legs h WHERE h.sequence = p.sequence) END",
    ),
    (
        "stored held totals equal the legs of the open holds",
        "SELECT format('account %s: stored held debits %s credits %s, open holds say %s %s', a.code,
                t.held_debits, t.held_credits, s.d, s.c)
         FROM account_totals t JOIN accounts a USING (account_id)
         CROSS JOIN LATERAL (
           SELECT coalesce(sum(l.amount) FILTER (WHERE l.direction = 'D'), 0) AS d,
                  coalesce(sum(l.amount) FILTER (WHERE l.direction = 'C'), 0) AS c
           FROM hold_legs l JOIN postings h ON h.sequence = l.sequence
           WHERE l.account_id = t.account_id AND h.hold
             AND NOT EXISTS (SELECT 1 FROM postings c WHERE c.closes_hold_posting_id = h.posting_id)) s
         WHERE t.held_debits <> s.d OR t.held_credits <> s.c",
    ),
    (
        "the index of expiring holds lists exactly the legs of the open holds with an expiry",
        "SELECT format('hold %s leg %s (account %s, expiring %s): the journal says %s, the index %s',
                hold_posting_id, leg_index, account_id, expires_at,
                coalesce(j.direction::text || ' ' || j.amount, 'no open hold'),
                coalesce(e.direction::text || ' ' || e.amount, 'nothing'))
         FROM (SELECT l.account_id, h.hold_expires_at AS expires_at, h.posting_id AS hold_posting_id,
                      l.leg_index, l.direction, l.amount
               FROM postings h JOIN hold_legs l ON l.sequence = h.sequence
               WHERE h.hold AND h.hold_expires_at IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM postings c WHERE c.closes_hold_posting_id = h.posting_id)) j
         FULL JOIN expiring_holds e USING (account_id, expires_at, hold_posting_id, leg_index)
         WHERE j.amount IS DISTINCT FROM e.amount OR j.direction IS DISTINCT FROM e.direction",
    ),
    (
        "every hold is closed at most once, after it, by a capture, a release or its expiry",
        "SELECT format('hold %s closed %s times', closes_hold_posting_id, count(*))
         FROM postings WHERE closes_hold_posting_id IS NOT NULL GROUP BY closes_hold_posting_id HAVING count(*) > 1
         UNION ALL
         SELECT format('posting %s closes %s, which is %s', c.sequence, c.closes_hold_posting_id,
                CASE WHEN h.posting_id IS NULL THEN 'missing' WHEN NOT h.hold THEN 'not a hold' ELSE 'recorded after it' END)
         FROM postings c LEFT JOIN postings h ON h.posting_id = c.closes_hold_posting_id
         WHERE c.closes_hold_posting_id IS NOT NULL AND (h.posting_id IS NULL OR NOT h.hold OR h.sequence >= c.sequence)
         UNION ALL
         SELECT format('release %s of hold %s is not its void', c.sequence, c.closes_hold_posting_id)
         FROM postings c WHERE c.close_kind = 'release' AND c.voids_posting_id IS DISTINCT FROM c.closes_hold_posting_id",
    ),
    (
        "every capture is within its hold: the hold's legs in order, each amount at most the held one",
        "SELECT format('capture %s of hold %s: leg %s is %s %s %s, the hold holds %s', c.sequence, h.sequence, x.leg_index,
                x.account_id, x.direction, x.amount, coalesce(format('%s %s %s', hl.account_id, hl.direction, hl.amount), 'nothing'))
         FROM postings c JOIN postings h ON h.posting_id = c.closes_hold_posting_id
         JOIN entries x ON x.sequence = c.sequence
         LEFT JOIN hold_legs hl ON hl.sequence = h.sequence AND hl.leg_index = x.leg_index
         WHERE c.close_kind = 'capture'
           AND (hl.leg_index IS NULL OR hl.account_id <> x.account_id OR hl.direction <> x.direction OR x.amount > hl.amount)
         UNION ALL
         SELECT format('capture %s of hold %s has %s legs, the hold %s', c.sequence, h.sequence,
                (SELECT count(*) FROM entries x WHERE x.sequence = c.sequence), (SELECT count(*) FROM hold_legs l WHERE l.sequence = h.sequence))
         FROM postings c JOIN postings h ON h.posting_id = c.closes_hold_posting_id
         WHERE c.close_kind = 'capture'
           AND (SELECT count(*) FROM entries x WHERE x.sequence = c.sequence) <> (SELECT count(*) FROM hold_legs l WHERE l.sequence = h.sequence)",
    ),
    (
        "every release of an expired hold is the ledger's, recorded after the expiry, effective at it",
        "SELECT format('expiry %s of hold %s: caller %s key %s, recorded %s effective %s, the hold expires %s', c.sequence, h.sequence,
                c.caller, c.idempotency_key, c.recorded_at, c.effective_at, coalesce(h.hold_expires_at::text, 'never'))
         FROM postings c JOIN postings h ON h.posting_id = c.closes_hold_posting_id
         WHERE c.close_kind = 'expire'
           AND (h.hold_expires_at IS NULL OR c.recorded_at <= h.hold_expires_at OR c.effective_at <> h.hold_expires_at
                OR c.caller <> 'ledger' OR c.idempotency_key <> 'expire:' || h.posting_id)
         UNION ALL
         SELECT format('release %s of hold %s does not mirror its leg %s', c.sequence, h.sequence, hl.leg_index)
         FROM postings c JOIN postings h ON h.posting_id = c.closes_hold_posting_id
         JOIN hold_legs hl ON hl.sequence = h.sequence
         LEFT JOIN hold_legs rl ON rl.sequence = c.sequence AND rl.leg_index = hl.leg_index
         WHERE c.close_kind IN ('release', 'expire')
           AND (rl.leg_index IS NULL OR rl.account_id <> hl.account_id OR rl.direction = hl.direction OR rl.amount <> hl.amount)",
    ),
    // The rules of account versions (migration 0014), from the journal alone. A version
    // applies to the postings after its after_sequence up to the next version's
    // (`VERSION_RANGES`). No check scans the legs once per version: each reads the legs of a
    // version's range on the index `(account_id, sequence)` of entries or hold_legs, and
    // ranges of one account do not overlap. Costs: the versions, one pass of account_terms;
    // the statuses, the ranges of frozen and closed versions only; floors and ceilings, at
    // most one pass of entries in index order, grouped by posting as it streams; debit
    // limits, the ordinary debit postings of limited versions and, per posting and limit, two
    // index probes (postings by recorded time, entries by sequence). On 1.46 M postings,
    // 2.9 M entries and 1,001 accounts with two limits: 11 ms, 4 ms, 9.7 s and 14 s
    // (docs/decisions/2026-12-03-debit-limits-cost.md).
    // (`public.account_totals`: the view of `ledger_scope` was made before the column
    // terms_version existed; the scoped accounts keep the join to the ledger checked.)
    (
        "every account's terms are versions 1, 2, 3 … in its ledger's order, and its totals name the last",
        "SELECT format('account %s: %s versions numbered %s..%s, its totals name version %s', a.code,
                coalesce(v.n, 0), v.lo, v.hi, t.terms_version)
         FROM accounts a
         LEFT JOIN (SELECT account_id, count(*) AS n, min(terms_version) AS lo, max(terms_version) AS hi
                    FROM account_terms GROUP BY account_id) v USING (account_id)
         LEFT JOIN public.account_totals t USING (account_id)
         WHERE v.account_id IS NULL OR v.lo <> 1 OR v.hi <> v.n OR t.terms_version <> v.hi
         UNION ALL
         SELECT format('account %s version %s is decided after sequence %s of ledger id %s: %s', a.code, x.terms_version,
                x.after_sequence & 1099511627775, x.after_sequence >> 40,
                CASE WHEN (x.after_sequence >> 40) <> a.ledger_id THEN format('not its ledger (id %s)', a.ledger_id)
                     WHEN x.after_sequence < x.prev THEN format('before version %s (after sequence %s)', x.terms_version - 1, x.prev & 1099511627775)
                     ELSE format('after the ledger''s last posting (%s)', s.last_sequence & 1099511627775) END)
         FROM (SELECT account_id, terms_version, after_sequence,
                      lag(after_sequence) OVER (PARTITION BY account_id ORDER BY terms_version) AS prev
               FROM account_terms) x
         JOIN accounts a USING (account_id) LEFT JOIN ledger_state s ON s.ledger_id = a.ledger_id
         WHERE (x.after_sequence >> 40) <> a.ledger_id OR x.after_sequence < x.prev OR x.after_sequence > s.last_sequence
         UNION ALL
         SELECT format('account %s version 1 is %s, floor %s, ceiling %s, limits %s: not its creation (open, floor %s, no ceiling, no limits)',
                a.code, v.status, coalesce(v.balance_floor::text, 'none'), coalesce(v.balance_ceiling::text, 'none'), v.debit_limits,
                CASE WHEN a.allow_negative THEN 'none' ELSE '0' END)
         FROM account_terms v JOIN accounts a USING (account_id)
         WHERE v.terms_version = 1 AND (v.status <> 'open' OR v.balance_ceiling IS NOT NULL OR v.debit_limits <> '[]'
           OR v.balance_floor IS DISTINCT FROM CASE WHEN a.allow_negative THEN NULL ELSE 0 END)",
    ),
    (
        // A frozen account still takes captures and releases (voids of holds, expiries) of
        // earlier holds; a void of an ordinary posting is a new posting.
        "no posting touches an account after it closed (closed empty), nor a new posting or hold while it is frozen",
        "SELECT format('posting %s (%s) touches account %s, %s at version %s (after sequence %s)', p.sequence & 1099511627775,
                CASE WHEN p.close_kind IS NOT NULL THEN p.close_kind WHEN p.hold THEN 'a hold'
                     WHEN p.voids_posting_id IS NOT NULL THEN 'a void' ELSE 'a posting' END,
                a.code, v.status, v.terms_version, v.after_sequence & 1099511627775)
         FROM VERSION_RANGES v JOIN accounts a USING (account_id)
         CROSS JOIN LATERAL (
           SELECT DISTINCT l.sequence FROM (
             SELECT e.sequence FROM entries e WHERE e.account_id = v.account_id
               AND e.sequence > v.after_sequence AND e.sequence <= v.until_sequence
             UNION ALL
             SELECT h.sequence FROM hold_legs h WHERE h.account_id = v.account_id
               AND h.sequence > v.after_sequence AND h.sequence <= v.until_sequence) l) l
         JOIN postings p ON p.sequence = l.sequence
         WHERE v.status IN ('frozen', 'closed') AND (v.status = 'closed' OR p.close_kind IS NULL)
         UNION ALL
         SELECT format('account %s is closed (version %s) with debits %s credits %s, held debits %s credits %s', a.code,
                v.terms_version, t.debits, t.credits, t.held_debits, t.held_credits)
         FROM account_terms v JOIN accounts a USING (account_id) JOIN account_totals t USING (account_id)
         WHERE v.status = 'closed' AND (t.debits <> t.credits OR t.held_debits <> 0 OR t.held_credits <> 0)",
    ),
    (
        // The balance after a posting is at least its available balance (the open holds that
        // lower it only take from it): at or above the floor is a necessary condition. Every
        // posting that raised the balance was checked against the ceiling (with the holds
        // that raise it, which only add). A posting is applied whole: the balance after it is
        // its last leg's on the account, not one between its legs. This is also the old
        // no-negative rule: version 1's floor is 0 unless the account allows negatives.
        "every posting leaves an account's balance at or above the floor of the version in force, and one that raised it at or below the ceiling",
        "SELECT format('account %s after posting %s: balance %s, %s %s of version %s', a.code, x.sequence & 1099511627775,
                x.balance, CASE WHEN x.balance < v.balance_floor THEN 'below the floor' ELSE 'raised above the ceiling' END,
                CASE WHEN x.balance < v.balance_floor THEN v.balance_floor ELSE v.balance_ceiling END, v.terms_version)
         FROM VERSION_RANGES v JOIN accounts a USING (account_id)
         CROSS JOIN LATERAL (
           SELECT e.sequence,
                  CASE a.normal_balance WHEN 'debit' THEN 1 ELSE -1 END * (max(e.debits_after) - max(e.credits_after)) AS balance,
                  CASE a.normal_balance WHEN 'debit' THEN 1 ELSE -1 END
                    * sum(CASE e.direction WHEN 'D' THEN e.amount ELSE -e.amount END) AS net
           FROM entries e WHERE e.account_id = v.account_id
             AND e.sequence > v.after_sequence AND e.sequence <= v.until_sequence
           GROUP BY e.sequence) x
         WHERE (v.balance_floor IS NOT NULL OR v.balance_ceiling IS NOT NULL)
           AND (x.balance < v.balance_floor OR (x.net > 0 AND x.balance > v.balance_ceiling))",
    ),
    (
        // Each window ends at a posting the ledger checked against the limit: an ordinary
        // posting (or a void of one) that debits the account; what it counted also had the
        // open holds' debits, which only add. A capture is not checked (its hold was), so
        // no window ends at one, though its debits count in the windows of others.
        "no posting debited an account past a debit limit of the version in force (the debits recorded in the window ending at it)",
        "SELECT format('account %s, posting %s recorded %s: %s debited in the %s s up to it, over debit_limits[%s] %s of version %s',
                a.code, x.sequence & 1099511627775, x.at, x.debits_after - b.before, l.secs, l.i - 1,
                coalesce(l.amount::text, 'unreadable'), v.terms_version)
         FROM VERSION_RANGES v JOIN accounts a USING (account_id)
         CROSS JOIN LATERAL (
           SELECT e.sequence, max(e.recorded_at) AS at, max(e.debits_after) AS debits_after
           FROM entries e
           WHERE e.account_id = v.account_id AND e.direction = 'D'
             AND e.sequence > v.after_sequence AND e.sequence <= v.until_sequence
             AND e.sequence NOT IN (SELECT c.sequence FROM postings c
                                    WHERE c.closes_hold_posting_id IS NOT NULL AND c.close_kind = 'capture')
           GROUP BY e.sequence) x
         CROSS JOIN LATERAL (
           SELECT i, CASE WHEN j->>'amount' ~ '^[0-9]{1,40}([.][0-9]{1,18})?$' THEN (j->>'amount')::numeric END AS amount,
                  CASE WHEN j->>'window_seconds' ~ '^[0-9]{1,9}$' THEN (j->>'window_seconds')::bigint END AS secs
           FROM jsonb_array_elements(CASE jsonb_typeof(v.debit_limits) WHEN 'array' THEN v.debit_limits ELSE '[]' END)
                WITH ORDINALITY AS l(j, i) OFFSET 0) l
         CROSS JOIN LATERAL (
           SELECT coalesce((SELECT e.debits_after FROM entries e
                            WHERE e.account_id = v.account_id AND e.sequence <= (
                              SELECT p.sequence FROM postings p
                              WHERE p.ledger_id = a.ledger_id AND p.recorded_at <= x.at - l.secs * interval '1 second'
                              ORDER BY p.recorded_at DESC LIMIT 1)
                            ORDER BY e.sequence DESC LIMIT 1), 0) AS before) b
         WHERE v.debit_limits <> '[]' AND (l.amount IS NULL OR l.secs IS NULL OR x.debits_after - b.before > l.amount)",
    ),
];

/// Every version of an account's terms with the last sequence it applies to
/// (`VERSION_RANGES` in the checks): it applies to the postings after its after_sequence up
/// to the next version's (the last version: all later ones).
const VERSION_RANGES_SQL: &str = "(SELECT v.*, coalesce(lead(v.after_sequence) OVER (PARTITION BY v.account_id ORDER BY v.terms_version), 9223372036854775807) AS until_sequence FROM account_terms v)";

/// Every leg, moving money or not (`ALL_LEGS` in the checks).
const ALL_LEGS_SQL: &str = "(SELECT sequence, leg_index, account_id, direction, amount FROM entries UNION ALL SELECT sequence, leg_index, account_id, direction, amount FROM hold_legs)";

/// Examples shown per violated invariant, at most.
pub const MAX_EXAMPLES: i64 = 5;

/// The id of the ledger with this code, to check it alone.
pub async fn ledger_named(
    client: &tokio_postgres::Client,
    code: &str,
) -> Result<Option<ledger_core::ledger::LedgerId>, StorageError> {
    let row = client
        .query_opt("SELECT ledger_id FROM ledgers WHERE code = $1", &[&code])
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Runs every check over every ledger. Runs in one REPEATABLE READ, READ ONLY transaction, so
/// all checks see one consistent snapshot even while the ledger is being written.
pub async fn run(client: &mut tokio_postgres::Client) -> Result<Vec<Finding>, StorageError> {
    run_in(client, None).await
}

/// Runs every check over one ledger (`None`: all of them): every table the checks read shows
/// only that ledger's rows (the views of schema `ledger_scope`, migration 0013).
pub async fn run_in(
    client: &mut tokio_postgres::Client,
    ledger: Option<ledger_core::ledger::LedgerId>,
) -> Result<Vec<Finding>, StorageError> {
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    if let Some(id) = ledger {
        tx.batch_execute(&format!(
            "SET LOCAL search_path = ledger_scope, public; SET LOCAL ledger.check_scope = '{id}'"
        ))
        .await?;
    }
    let mut findings = Vec::new();
    for (name, sql) in CHECKS {
        let sql = sql
            .replace("ALL_LEGS", ALL_LEGS_SQL)
            .replace("VERSION_RANGES", VERSION_RANGES_SQL);
        let count: i64 = tx
            .query_one(&format!("SELECT count(*) FROM ({sql}) v"), &[])
            .await?
            .get(0);
        let examples = if count > 0 {
            tx.query(
                &format!("SELECT * FROM ({sql}) v LIMIT {MAX_EXAMPLES}"),
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default())
            .collect()
        } else {
            Vec::new()
        };
        findings.push(Finding {
            name,
            violations: count,
            examples,
        });
    }
    tx.commit().await?;
    Ok(findings)
}

/// Every ledger's cluster as the directory on `main` says (its latest placement, else `main`):
/// (id, code, cluster).
const DIRECTORY_SQL: &str =
    "SELECT l.ledger_id, l.code, coalesce((SELECT p.cluster FROM ledger_placements p
     WHERE p.ledger_id = l.ledger_id ORDER BY p.version DESC LIMIT 1), 'main') FROM ledgers l";

/// The cluster the directory on `main` places the ledger with this code on (`None`: no
/// such ledger).
pub async fn placed_on(
    main: &tokio_postgres::Client,
    code: &str,
) -> Result<Option<String>, StorageError> {
    let sql =
        format!("SELECT cluster FROM ({DIRECTORY_SQL}) d (id, code, cluster) WHERE code = $1");
    let row = main.query_opt(&sql, &[&code]).await?;
    Ok(row.map(|r| r.get(0)))
}

/// Every ledger a cluster has, and whether it holds journal rows of it (accounts or postings)
/// that may take writes: a copy a move has fenced (migration 0020) is read-only.
const HOLDINGS_SQL: &str = "SELECT l.ledger_id, l.code,
     (EXISTS (SELECT 1 FROM accounts a WHERE a.ledger_id = l.ledger_id)
      OR EXISTS (SELECT 1 FROM postings p WHERE p.sequence > (l.ledger_id::bigint << 40)
                 AND p.sequence < ((l.ledger_id::bigint + 1) << 40)))
     AND NOT coalesce((SELECT f.fenced FROM ledger_fences f WHERE f.ledger_id = l.ledger_id
                       ORDER BY f.fence_no DESC LIMIT 1), false)
     FROM ledgers l";

/// The directory checked against the clusters (by name and URL, `main` first): every ledger a
/// cluster has is the directory's, by id and code; and journal rows of a ledger are only on
/// the cluster the directory places it on. Also (cluster, code) of each ledger placed on a
/// cluster not among them, which was not read.
pub async fn placements_over(
    clusters: &[(String, String)],
) -> Result<(Vec<Finding>, Vec<(String, String)>), StorageError> {
    use std::collections::HashMap;
    let main = super::connect(&clusters[0].1).await?;
    let directory: HashMap<i32, (String, String)> = main
        .query(DIRECTORY_SQL, &[])
        .await?
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let mut unread: Vec<(String, String)> = directory
        .values()
        .filter(|(_, c)| !clusters.iter().any(|(n, _)| n == c))
        .map(|(code, c)| (c.clone(), code.clone()))
        .collect();
    unread.sort();
    let mut foreign = Vec::new();
    let mut misplaced = Vec::new();
    for (name, url) in clusters {
        let client = super::connect(url).await?;
        for r in client.query(HOLDINGS_SQL, &[]).await? {
            let (id, code, holds): (i32, String, bool) = (r.get(0), r.get(1), r.get(2));
            match directory.get(&id) {
                Some((c, _)) if *c != code => foreign.push(format!(
                    "cluster {name} has ledger id {id} as {code:?}; the directory, as {c:?}"
                )),
                None => foreign.push(format!(
                    "cluster {name} has ledger {code:?} (id {id}), which the directory does not"
                )),
                Some((_, placed)) if holds && placed != name => misplaced.push(format!(
                    "cluster {name} holds journal rows of ledger {code:?}, which the directory places on {placed}"
                )),
                Some(_) => {}
            }
        }
    }
    let finding = |name, examples: Vec<String>| Finding {
        name,
        violations: examples.len() as i64,
        examples: examples.into_iter().take(MAX_EXAMPLES as usize).collect(),
    };
    let findings = vec![
        finding(
            "every ledger on a cluster is the directory's, by id and code",
            foreign,
        ),
        finding(
            "a ledger's journal rows are only on the cluster the directory places it on (or in a copy a move fenced)",
            misplaced,
        ),
    ];
    Ok((findings, unread))
}
