//! `ListRollups`: the account-code tree's nodes at one cut-off, a page at a time. Every page
//! sums the accounts beneath the prefix at the first page's cut-off (`storage::read::
//! rollup_groups`, one statement) and goes on after the token's node, so a page token always
//! gives the same page: nothing is stored between pages that could drift.

use super::lists::{read_at, scope, write_at};
use super::replicas::{at_read, Cut};
use super::{page_size, Ledger};
use crate::storage::{self, StorageError};
use ledger_core::ledger::Ledger as Book;
use ledger_core::page::Fill;
use ledger_core::page_token::{self, Writer};
use ledger_core::record::{AppliedAsOf, AsOf};
use ledger_core::rollup::{after, roll_up, Rollup, RollupRequest};
use ledger_core::LedgerError;

/// A page of rollups, the cut-off it applied, and the next page's token (empty on the last).
pub type RollupPage = (Vec<Rollup>, AppliedAsOf, String);

impl Ledger {
    /// The nodes under `prefix` down to `depth` segments at a cut-off, in tree order.
    pub async fn list_rollups(
        &self,
        book: &Book,
        prefix: &str,
        depth: u32,
        as_of: AsOf,
        size: u32,
        token: &str,
    ) -> Result<RollupPage, LedgerError> {
        let req = RollupRequest::new(prefix, depth)?;
        let limit = page_size(size)? as usize;
        let scope = scope(book, format!("rollups:{depth}:{prefix}"));
        let (cut, last) = match token {
            "" => (Cut::Requested(as_of), None),
            t => {
                let mut r = page_token::open(&self.page_key, &scope, t)?;
                let (at, node) = (read_at(&mut r)?, r.text()?);
                r.finish()?;
                (Cut::Applied(at), Some(node))
            }
        };
        let read = at_read(|client, at| {
            let req = req.clone();
            let ledger = book.id;
            Box::pin(async move {
                let groups = storage::read::rollup_groups(client, ledger, &req, at)
                    .await
                    .map_err(StorageError::into_ledger_error)?;
                roll_up(&req, &groups)
            })
        });
        let (at, nodes) = self.read_at(book, cut, read).await?;
        let rest = after(&nodes, last.as_deref());
        let mut page = Fill::new(limit, 0);
        let mut more = false;
        for r in rest {
            if !page.offer(r.clone()) {
                more = true;
                break;
            }
        }
        let page = page.into_items();
        let next = match page.last() {
            Some(last) if more => {
                let mut w = Writer::new();
                write_at(&mut w, &at);
                w.text(&last.node);
                w.seal(&self.page_key, &scope)
            }
            _ => String::new(),
        };
        Ok((page, at, next))
    }
}
