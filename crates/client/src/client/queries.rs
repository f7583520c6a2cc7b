//! The finance queries: postings by filter, and rollups of the account tree at a cut-off.

use super::{Client, PAGE_SIZE};
use crate::error::Error;
use crate::pb;
use crate::types::{time_from_pb, Applied, AsOf, Posting, PostingFilter, Rollup, Rollups};

/// One page of postings and the token of the next (empty on the last page).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostingPage {
    pub postings: Vec<Posting>,
    pub next_page_token: String,
}

impl Client {
    /// One page of the postings `filter` keeps, in sequence order (`page_token`: the previous
    /// page's `next_page_token`, empty for the first). The first page fixes the last sequence
    /// the listing includes, so the pages after it are those of the same listing.
    pub async fn list_postings(
        &self,
        filter: &PostingFilter,
        page_size: u32,
        page_token: &str,
    ) -> Result<PostingPage, Error> {
        let req = filter.to_pb(self.ledger_field()?, page_size, page_token.to_owned());
        let page = self
            .calls
            .call(req, |mut c, r| async move { c.list_postings(r).await })
            .await?;
        Ok(PostingPage {
            postings: page
                .postings
                .into_iter()
                .map(Posting::from_pb)
                .collect::<Result<_, _>>()?,
            next_page_token: page.next_page_token,
        })
    }

    /// Every posting `filter` keeps (every page), in sequence order.
    pub async fn postings(&self, filter: &PostingFilter) -> Result<Vec<Posting>, Error> {
        let (mut out, mut token) = (Vec::new(), String::new());
        loop {
            let page = self.list_postings(filter, PAGE_SIZE, &token).await?;
            out.extend(page.postings);
            if page.next_page_token.is_empty() {
                return Ok(out);
            }
            token = page.next_page_token;
        }
    }

    /// The rollups of the account-code tree under `prefix` (whole segments; empty: the root)
    /// down to `depth` more segments, at one cut-off (every page), in tree order.
    pub async fn rollups(&self, prefix: &str, depth: u32, as_of: AsOf) -> Result<Rollups, Error> {
        let ledger = self.ledger_field()?;
        let (mut rollups, mut token) = (Vec::new(), String::new());
        loop {
            let req = pb::ListRollupsRequest {
                ledger: ledger.clone(),
                prefix: prefix.into(),
                depth,
                as_of: as_of.to_pb(),
                page_size: PAGE_SIZE,
                page_token: token,
            };
            let page = self
                .calls
                .call(req, |mut c, r| async move { c.list_rollups(r).await })
                .await?;
            for r in page.rollups {
                rollups.push(Rollup::from_pb(r)?);
            }
            if page.next_page_token.is_empty() {
                let at = page.as_of.unwrap_or_default();
                let as_of = Applied {
                    recorded_at: time_from_pb("as_of.recorded_at", at.recorded_at)?,
                    effective_at: time_from_pb("as_of.effective_at", at.effective_at)?,
                    sequence: page.as_of_sequence,
                };
                return Ok(Rollups { rollups, as_of });
            }
            token = page.next_page_token;
        }
    }
}
