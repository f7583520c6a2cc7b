//! `ledger.v1.Ledger`: each handler converts its request, calls the service, converts back.

use super::convert::*;
use super::pb::{self, ledger_server};
use super::status::to_status;
use super::{Caller, ANONYMOUS};
use crate::service;
use ledger_core::LedgerError;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The gRPC face of the ledger.
#[derive(Clone)]
pub struct LedgerGrpc {
    ledger: Arc<service::Ledger>,
}

impl LedgerGrpc {
    pub fn new(ledger: Arc<service::Ledger>) -> LedgerGrpc {
        LedgerGrpc { ledger }
    }
}

fn caller<T>(req: &Request<T>) -> String {
    req.extensions()
        .get::<Caller>()
        .map(|c| c.0.clone())
        .unwrap_or_else(|| ANONYMOUS.to_owned())
}

type Reply<T> = Result<Response<T>, Status>;

fn reply<T>(r: Result<T, LedgerError>) -> Reply<T> {
    r.map(Response::new).map_err(to_status)
}

#[tonic::async_trait]
impl ledger_server::Ledger for LedgerGrpc {
    async fn create_ledger(
        &self,
        _req: Request<pb::CreateLedgerRequest>,
    ) -> Reply<pb::CreateLedgerResponse> {
        Err(Status::unimplemented("LEDGERS-WIP"))
    }

    async fn get_ledger(&self, _req: Request<pb::GetLedgerRequest>) -> Reply<pb::LedgerInfo> {
        Err(Status::unimplemented("LEDGERS-WIP"))
    }

    async fn list_ledgers(
        &self,
        _req: Request<pb::ListLedgersRequest>,
    ) -> Reply<pb::ListLedgersResponse> {
        Err(Status::unimplemented("LEDGERS-WIP"))
    }

    async fn create_account(
        &self,
        req: Request<pb::CreateAccountRequest>,
    ) -> Reply<pb::CreateAccountResponse> {
        let r = req.into_inner();
        reply(
            self.ledger
                .create_account(
                    &r.code,
                    &r.currency,
                    r.scale,
                    normal_from_pb(r.normal_balance),
                    r.allow_negative,
                    metadata(r.metadata),
                )
                .await
                .map(|(a, created)| pb::CreateAccountResponse {
                    account: Some(account_to_pb(&a)),
                    created,
                }),
        )
    }

    async fn get_account(&self, req: Request<pb::GetAccountRequest>) -> Reply<pb::Account> {
        reply(
            self.ledger
                .get_account(&req.into_inner().code)
                .await
                .map(|a| account_to_pb(&a)),
        )
    }

    async fn list_accounts(
        &self,
        req: Request<pb::ListAccountsRequest>,
    ) -> Reply<pb::ListAccountsResponse> {
        let r = req.into_inner();
        reply(
            self.ledger
                .list_accounts(&r.prefix, r.page_size, &r.page_token)
                .await
                .map(|(accounts, next)| pb::ListAccountsResponse {
                    accounts: accounts.iter().map(account_to_pb).collect(),
                    next_page_token: next,
                }),
        )
    }

    async fn post(&self, req: Request<pb::PostRequest>) -> Reply<pb::PostResponse> {
        let caller = caller(&req);
        let result = async {
            let r = post_from_pb(req.into_inner())?;
            self.ledger.post(&caller, r).await
        }
        .await;
        reply(result.map(|d| pb::PostResponse {
            posting: Some(posting_to_pb(
                &d.posting,
                ledger_core::ledger::DEFAULT_LEDGER,
            )),
            replayed: d.replayed,
        }))
    }

    async fn post_batch(&self, req: Request<pb::PostBatchRequest>) -> Reply<pb::PostBatchResponse> {
        let caller = caller(&req);
        let requests = req.into_inner().requests;
        crate::metrics::post_batch(requests.len());
        let converted = requests.into_iter().map(post_from_pb).collect();
        reply(
            self.ledger
                .post_batch(&caller, converted)
                .await
                .map(|outcomes| pb::PostBatchResponse {
                    results: outcomes.into_iter().map(batch_result_to_pb).collect(),
                }),
        )
    }

    async fn void(&self, req: Request<pb::VoidRequest>) -> Reply<pb::VoidResponse> {
        let caller = caller(&req);
        let result = async {
            let r = void_from_pb(req.into_inner())?;
            self.ledger.void(&caller, r).await
        }
        .await;
        reply(result.map(|d| pb::VoidResponse {
            posting: Some(posting_to_pb(
                &d.posting,
                ledger_core::ledger::DEFAULT_LEDGER,
            )),
            replayed: d.replayed,
        }))
    }

    async fn capture(&self, req: Request<pb::CaptureRequest>) -> Reply<pb::CaptureResponse> {
        let caller = caller(&req);
        let result = async {
            let r = capture_from_pb(req.into_inner())?;
            self.ledger.capture(&caller, r).await
        }
        .await;
        reply(result.map(|d| pb::CaptureResponse {
            posting: Some(posting_to_pb(
                &d.posting,
                ledger_core::ledger::DEFAULT_LEDGER,
            )),
            replayed: d.replayed,
        }))
    }

    async fn get_posting(&self, req: Request<pb::GetPostingRequest>) -> Reply<pb::Posting> {
        let caller = caller(&req);
        let r = req.into_inner();
        let result = async {
            let as_of = as_of_from_pb(r.as_of)?;
            match r.by {
                Some(pb::get_posting_request::By::PostingId(id)) => {
                    self.ledger.get_posting(&id, as_of).await
                }
                Some(pb::get_posting_request::By::IdempotencyKey(k)) => {
                    self.ledger.get_posting_by_key(&caller, &k, as_of).await
                }
                None => Err(LedgerError::new(
                    ledger_core::Reason::InvalidField,
                    "GetPosting needs posting_id or idempotency_key",
                )),
            }
        }
        .await;
        reply(result.map(|p| posting_to_pb(&p, ledger_core::ledger::DEFAULT_LEDGER)))
    }

    async fn list_postings(
        &self,
        req: Request<pb::ListPostingsRequest>,
    ) -> Reply<pb::ListPostingsResponse> {
        let r = req.into_inner();
        reply(
            self.ledger
                .list_postings(&r.account, r.page_size, &r.page_token)
                .await
                .map(|(postings, next)| pb::ListPostingsResponse {
                    postings: postings
                        .iter()
                        .map(|p| posting_to_pb(p, ledger_core::ledger::DEFAULT_LEDGER))
                        .collect(),
                    next_page_token: next,
                }),
        )
    }

    async fn get_balance(&self, req: Request<pb::GetBalanceRequest>) -> Reply<pb::Balance> {
        let r = req.into_inner();
        let result = async {
            let as_of = as_of_from_pb(r.as_of)?;
            self.ledger.get_balance(&r.account, as_of).await
        }
        .await;
        reply(result.map(|b| balance_to_pb(&b)))
    }

    async fn list_balances(
        &self,
        req: Request<pb::ListBalancesRequest>,
    ) -> Reply<pb::ListBalancesResponse> {
        let r = req.into_inner();
        let result = async {
            let as_of = as_of_from_pb(r.as_of)?;
            self.ledger
                .list_balances(&r.prefix, as_of, r.page_size, &r.page_token)
                .await
        }
        .await;
        reply(
            result.map(|(balances, totals, next)| pb::ListBalancesResponse {
                balances: balances.iter().map(balance_to_pb).collect(),
                totals: totals.iter().map(total_to_pb).collect(),
                next_page_token: next,
            }),
        )
    }

    async fn list_entries(
        &self,
        req: Request<pb::ListEntriesRequest>,
    ) -> Reply<pb::ListEntriesResponse> {
        let r = req.into_inner();
        let result = async {
            let as_of = as_of_from_pb(r.as_of)?;
            self.ledger
                .list_entries(&r.account, as_of, r.page_size, &r.page_token)
                .await
        }
        .await;
        reply(result.map(|(entries, next)| pb::ListEntriesResponse {
            entries: entries.iter().map(entry_to_pb).collect(),
            next_page_token: next,
        }))
    }
}
