//! The verifiable journal and period closes of the client's ledger: its digest, and its closes
//! (docs/verifiable.md). Proofs are checked offline by `ledger verify-proof`.

use super::{Client, PAGE_SIZE};
use crate::error::Error;
use crate::pb;

impl Client {
    /// The digest of the ledger's Merkle tree now: its size, root and when its last posting
    /// was recorded.
    pub async fn digest(&self) -> Result<pb::Digest, Error> {
        let req = pb::GetDigestRequest {
            ledger: self.ledger_code().to_owned(),
        };
        self.calls
            .call(req, |mut c, r| async move { c.get_digest(r).await })
            .await
    }

    /// Every period close of the ledger, oldest first (every page), each with its trial
    /// balance's totals and digest.
    pub async fn period_closes(&self) -> Result<Vec<pb::PeriodClose>, Error> {
        let (mut out, mut token) = (Vec::new(), String::new());
        loop {
            let req = pb::ListPeriodClosesRequest {
                ledger: self.ledger_code().to_owned(),
                page_size: PAGE_SIZE,
                page_token: token,
            };
            let page = self
                .calls
                .call(req, |mut c, r| async move { c.list_period_closes(r).await })
                .await?;
            out.extend(page.closes);
            if page.next_page_token.is_empty() {
                return Ok(out);
            }
            token = page.next_page_token;
        }
    }
}
