//! The calls about ledgers themselves: `CreateLedger`, `GetLedger`, `ListLedgers`. They name
//! a ledger by its code, whatever ledger the client's other calls name; a code the ledger
//! would refuse fails before anything is sent.

use super::{Client, PAGE_SIZE};
use crate::error::Error;
use crate::pb;
use crate::types::{validate_ledger_code, CreatedLedger, Ledger, LedgerPage, NewLedger};

impl Client {
    /// Creates a ledger, or finds the identical one (`created: false`); one with the same code
    /// and another description or metadata is `LEDGER_CONFLICT`. Needs the role `admin` when
    /// the server authenticates. Retried while its outcome is unknown (a retry of a call that
    /// did create it answers `created: false`).
    pub async fn create_ledger(&self, l: NewLedger) -> Result<CreatedLedger, Error> {
        validate_ledger_code(&l.code)?;
        let req = pb::CreateLedgerRequest {
            code: l.code,
            description: l.description,
            metadata: l.metadata.into_iter().collect(),
            cluster: l.cluster,
        };
        let r = self
            .calls
            .call(req, |mut c, r| async move { c.create_ledger(r).await })
            .await?;
        CreatedLedger::from_pb(r)
    }

    /// A ledger by code (`LEDGER_NOT_FOUND`, or `LEDGER_NOT_GRANTED` for a caller the server's
    /// auth file does not grant it).
    pub async fn get_ledger(&self, code: &str) -> Result<Ledger, Error> {
        validate_ledger_code(code)?;
        let req = pb::GetLedgerRequest { code: code.into() };
        let l = self
            .calls
            .call(req, |mut c, r| async move { c.get_ledger(r).await })
            .await?;
        Ledger::from_pb(l)
    }

    /// One page of the ledgers the caller is granted, in code order: at most `page_size` (0:
    /// the server's default, 100; at most [`PAGE_SIZE`]), after the page whose
    /// `next_page_token` is `page_token` (empty: the first page).
    pub async fn list_ledgers(
        &self,
        page_size: u32,
        page_token: &str,
    ) -> Result<LedgerPage, Error> {
        let req = pb::ListLedgersRequest {
            page_size,
            page_token: page_token.into(),
        };
        let page = self
            .calls
            .call(req, |mut c, r| async move { c.list_ledgers(r).await })
            .await?;
        LedgerPage::from_pb(page)
    }

    /// Every ledger the caller is granted, in code order (every page).
    pub async fn list_all_ledgers(&self) -> Result<Vec<Ledger>, Error> {
        let mut ledgers = Vec::new();
        let mut token = String::new();
        loop {
            let page = self.list_ledgers(PAGE_SIZE, &token).await?;
            ledgers.extend(page.ledgers);
            if page.next_page_token.is_empty() {
                return Ok(ledgers);
            }
            token = page.next_page_token;
        }
    }
}
