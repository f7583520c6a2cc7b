//! `ledger.v1.Ledger`: each handler converts its request, finds the ledger it names (if the
//! caller is granted it), calls the service, converts back.

use super::convert::*;
use super::pb::{self, ledger_server};
use super::status::to_status;
use super::{Caller, ANONYMOUS};
use crate::service;
use ledger_core::ledger::{Grants, Ledger as Book};
use ledger_core::{LedgerError, Reason};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The gRPC face of the ledger.
#[derive(Clone)]
pub struct LedgerGrpc {
    pub(super) ledger: Arc<service::Ledger>,
}

impl LedgerGrpc {
    pub fn new(ledger: Arc<service::Ledger>) -> LedgerGrpc {
        LedgerGrpc { ledger }
    }

    /// The ledger a request names, if its caller may use it.
    pub(super) async fn book(&self, grants: &Grants, field: &str) -> Result<Book, LedgerError> {
        self.ledger.ledger_for(grants, field).await
    }
}

pub(super) fn caller<T>(req: &Request<T>) -> String {
    req.extensions()
        .get::<Caller>()
        .map(|c| c.name.clone())
        .unwrap_or_else(|| ANONYMOUS.to_owned())
}

/// The ledgers the caller of a request is granted (every one without the extension: no auth
/// layer, as without authentication).
pub(super) fn grants<T>(req: &Request<T>) -> Grants {
    req.extensions()
        .get::<Caller>()
        .map(|c| c.grants.clone())
        .unwrap_or(Grants::All)
}

pub(super) type Reply<T> = Result<Response<T>, Status>;

pub(super) fn reply<T>(r: Result<T, LedgerError>) -> Reply<T> {
    r.map(Response::new).map_err(to_status)
}

/// A write's answer: its posting (in its ledger) and whether it was decided before.
fn written(d: ledger_core::record::Decided, book: &Book) -> (Option<pb::Posting>, bool) {
    (Some(posting_to_pb(&d.posting, &book.code)), d.replayed)
}

/// A `PostBatch` request naming a ledger other than the call's (a batch writes one ledger).
fn in_call_ledger(r: pb::PostRequest, book: &Book) -> Result<pb::PostRequest, LedgerError> {
    if r.ledger.is_empty() || r.ledger == book.code {
        return Ok(r);
    }
    Err(LedgerError::new(
        Reason::InvalidField,
        format!(
            "the request names ledger {:?} but the call's ledger is {:?}: a PostBatch call writes one ledger (set PostBatchRequest.ledger, leave the requests' empty)",
            ledger_core::account::truncate_for_message(&r.ledger),
            book.code
        ),
    )
    .with("field", "ledger"))
}

#[tonic::async_trait]
impl ledger_server::Ledger for LedgerGrpc {
    async fn create_account(
        &self,
        req: Request<pb::CreateAccountRequest>,
    ) -> Reply<pb::CreateAccountResponse> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let normal = normal_from_pb(r.normal_balance);
            let new = ledger_core::NewAccount::validate(
                &r.code,
                &r.currency,
                r.scale,
                normal,
                r.allow_negative,
                metadata(r.metadata),
            )?;
            let (a, created) = self.ledger.create_account(&book, new).await?;
            let (a, v) = self
                .ledger
                .get_account_version(&book, &a.code, Default::default())
                .await?;
            Ok(pb::CreateAccountResponse {
                account: Some(account_to_pb(&a, &v, &book.code)),
                created,
            })
        };
        reply(result.await)
    }

    async fn get_account(&self, req: Request<pb::GetAccountRequest>) -> Reply<pb::Account> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let as_of = as_of_from_pb(r.as_of)?;
            let (a, v) = self
                .ledger
                .get_account_version(&book, &r.code, as_of)
                .await?;
            Ok(account_to_pb(&a, &v, &book.code))
        };
        reply(result.await)
    }

    async fn update_account(
        &self,
        req: Request<pb::UpdateAccountRequest>,
    ) -> Reply<pb::UpdateAccountResponse> {
        let (grants, caller) = (grants(&req), caller(&req));
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let (a, v, replayed) = self
                .ledger
                .update_account(&book, &caller, update_from_pb(r))
                .await?;
            Ok(pb::UpdateAccountResponse {
                account: Some(account_to_pb(&a, &v, &book.code)),
                replayed,
            })
        };
        reply(result.await)
    }

    async fn list_account_versions(
        &self,
        req: Request<pb::ListAccountVersionsRequest>,
    ) -> Reply<pb::ListAccountVersionsResponse> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let (a, versions, next) = self
                .ledger
                .account_versions(&book, &r.code, r.page_size, &r.page_token)
                .await?;
            Ok(pb::ListAccountVersionsResponse {
                versions: versions
                    .iter()
                    .map(|v| account_to_pb(&a, v, &book.code))
                    .collect(),
                next_page_token: next,
            })
        };
        reply(result.await)
    }

    async fn list_accounts(
        &self,
        req: Request<pb::ListAccountsRequest>,
    ) -> Reply<pb::ListAccountsResponse> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let (accounts, next) = self
                .ledger
                .list_accounts(&book, &r.prefix, r.page_size, &r.page_token)
                .await?;
            let versions = self.ledger.current_versions(&accounts).await?;
            Ok(pb::ListAccountsResponse {
                accounts: accounts
                    .iter()
                    .map(|a| account_to_pb(a, &versions[&a.id], &book.code))
                    .collect(),
                next_page_token: next,
            })
        };
        reply(result.await)
    }

    async fn post(&self, req: Request<pb::PostRequest>) -> Reply<pb::PostResponse> {
        let (caller, grants) = (caller(&req), grants(&req));
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let d = self.ledger.post(&book, &caller, post_from_pb(r)?).await?;
            let (posting, replayed) = written(d, &book);
            Ok(pb::PostResponse { posting, replayed })
        };
        reply(result.await)
    }

    async fn post_batch(&self, req: Request<pb::PostBatchRequest>) -> Reply<pb::PostBatchResponse> {
        let (caller, grants) = (caller(&req), grants(&req));
        let r = req.into_inner();
        crate::metrics::post_batch(r.requests.len());
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let converted = r
                .requests
                .into_iter()
                .map(|p| in_call_ledger(p, &book).and_then(post_from_pb))
                .collect();
            let outcomes = self.ledger.post_batch(&book, &caller, converted).await?;
            Ok(pb::PostBatchResponse {
                results: outcomes
                    .into_iter()
                    .map(|o| batch_result_to_pb(o, &book.code))
                    .collect(),
            })
        };
        reply(result.await)
    }

    async fn void(&self, req: Request<pb::VoidRequest>) -> Reply<pb::VoidResponse> {
        let (caller, grants) = (caller(&req), grants(&req));
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let d = self.ledger.void(&book, &caller, void_from_pb(r)?).await?;
            let (posting, replayed) = written(d, &book);
            Ok(pb::VoidResponse { posting, replayed })
        };
        reply(result.await)
    }

    async fn capture(&self, req: Request<pb::CaptureRequest>) -> Reply<pb::CaptureResponse> {
        let (caller, grants) = (caller(&req), grants(&req));
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let d = self
                .ledger
                .capture(&book, &caller, capture_from_pb(r)?)
                .await?;
            let (posting, replayed) = written(d, &book);
            Ok(pb::CaptureResponse { posting, replayed })
        };
        reply(result.await)
    }

    async fn get_posting(&self, req: Request<pb::GetPostingRequest>) -> Reply<pb::Posting> {
        let (caller, grants) = (caller(&req), grants(&req));
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let as_of = as_of_from_pb(r.as_of)?;
            let p = match r.by {
                Some(pb::get_posting_request::By::PostingId(id)) => {
                    self.ledger.get_posting(&book, &id, as_of).await?
                }
                Some(pb::get_posting_request::By::IdempotencyKey(k)) => {
                    self.ledger
                        .get_posting_by_key(&book, &caller, &k, as_of)
                        .await?
                }
                None => {
                    return Err(LedgerError::new(
                        Reason::InvalidField,
                        "GetPosting needs posting_id or idempotency_key",
                    ))
                }
            };
            Ok(posting_to_pb(&p, &book.code))
        };
        reply(result.await)
    }

    async fn list_postings(
        &self,
        req: Request<pb::ListPostingsRequest>,
    ) -> Reply<pb::ListPostingsResponse> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let filter = posting_filter_from_pb(&r)?;
            let (postings, next) = self
                .ledger
                .list_postings(&book, &r.account, &filter, r.page_size, &r.page_token)
                .await?;
            Ok(pb::ListPostingsResponse {
                postings: postings
                    .iter()
                    .map(|p| posting_to_pb(p, &book.code))
                    .collect(),
                next_page_token: next,
            })
        };
        reply(result.await)
    }

    async fn get_balance(&self, req: Request<pb::GetBalanceRequest>) -> Reply<pb::Balance> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let as_of = as_of_from_pb(r.as_of)?;
            let b = self.ledger.get_balance(&book, &r.account, as_of).await?;
            Ok(balance_to_pb(&b))
        };
        reply(result.await)
    }

    async fn list_balances(
        &self,
        req: Request<pb::ListBalancesRequest>,
    ) -> Reply<pb::ListBalancesResponse> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let as_of = as_of_from_pb(r.as_of)?;
            let (balances, totals, next) = self
                .ledger
                .list_balances(&book, &r.prefix, as_of, r.page_size, &r.page_token)
                .await?;
            Ok(pb::ListBalancesResponse {
                balances: balances.iter().map(balance_to_pb).collect(),
                totals: totals.iter().map(total_to_pb).collect(),
                next_page_token: next,
            })
        };
        reply(result.await)
    }

    async fn list_rollups(
        &self,
        req: Request<pb::ListRollupsRequest>,
    ) -> Reply<pb::ListRollupsResponse> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let as_of = as_of_from_pb(r.as_of)?;
            let (page, at, next) = self
                .ledger
                .list_rollups(&book, &r.prefix, r.depth, as_of, r.page_size, &r.page_token)
                .await?;
            Ok(rollups_to_pb(&page, &at, next))
        };
        reply(result.await)
    }

    async fn list_entries(
        &self,
        req: Request<pb::ListEntriesRequest>,
    ) -> Reply<pb::ListEntriesResponse> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = async {
            let book = self.book(&grants, &r.ledger).await?;
            let as_of = as_of_from_pb(r.as_of)?;
            let (entries, next) = self
                .ledger
                .list_entries(&book, &r.account, as_of, r.page_size, &r.page_token)
                .await?;
            Ok(pb::ListEntriesResponse {
                entries: entries.iter().map(entry_to_pb).collect(),
                next_page_token: next,
            })
        };
        reply(result.await)
    }

    async fn create_ledger(
        &self,
        req: Request<pb::CreateLedgerRequest>,
    ) -> Reply<pb::CreateLedgerResponse> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = self
            .ledger
            .create_ledger(
                &grants,
                &r.code,
                &r.description,
                metadata(r.metadata),
                &r.cluster,
            )
            .await;
        reply(result.map(|(l, created)| pb::CreateLedgerResponse {
            ledger: Some(ledger_to_pb(&l)),
            created,
        }))
    }

    async fn get_ledger(&self, req: Request<pb::GetLedgerRequest>) -> Reply<pb::LedgerInfo> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = self.ledger.get_ledger(&grants, &r.code).await;
        reply(result.map(|l| ledger_to_pb(&l)))
    }

    async fn list_ledgers(
        &self,
        req: Request<pb::ListLedgersRequest>,
    ) -> Reply<pb::ListLedgersResponse> {
        let grants = grants(&req);
        let r = req.into_inner();
        let result = self
            .ledger
            .list_ledgers(&grants, r.page_size, &r.page_token)
            .await;
        reply(result.map(|(ledgers, next)| pb::ListLedgersResponse {
            ledgers: ledgers.iter().map(ledger_to_pb).collect(),
            next_page_token: next,
        }))
    }

    async fn get_digest(&self, req: Request<pb::GetDigestRequest>) -> Reply<pb::Digest> {
        super::journal::get_digest(self, req).await
    }

    async fn get_inclusion_proof(
        &self,
        req: Request<pb::GetInclusionProofRequest>,
    ) -> Reply<pb::InclusionProof> {
        super::journal::get_inclusion_proof(self, req).await
    }

    async fn get_consistency_proof(
        &self,
        req: Request<pb::GetConsistencyProofRequest>,
    ) -> Reply<pb::ConsistencyProof> {
        super::journal::get_consistency_proof(self, req).await
    }

    async fn close_period(
        &self,
        req: Request<pb::ClosePeriodRequest>,
    ) -> Reply<pb::ClosePeriodResponse> {
        super::journal::close_period(self, req).await
    }

    async fn list_period_closes(
        &self,
        req: Request<pb::ListPeriodClosesRequest>,
    ) -> Reply<pb::ListPeriodClosesResponse> {
        super::journal::list_period_closes(self, req).await
    }
}
