//! The calls about accounts: `CreateAccount`, `GetAccount` (now or as of a cut-off),
//! `UpdateAccount` and `ListAccountVersions`. Each account read keeps its scale (which never
//! changes) for the amounts written later; its terms are read again on every call, since an
//! update may change them at any time.

use super::{Client, PAGE_SIZE};
use crate::error::{Error, ErrorKind};
use crate::pb;
use crate::types::{Account, AccountUpdate, AsOf, NewAccount};

impl Client {
    /// Creates an account, or finds the identical one (`true` when it was created now).
    pub async fn create_account(&self, a: NewAccount) -> Result<(Account, bool), Error> {
        let req = pb::CreateAccountRequest {
            ledger: self.ledger_field()?,
            code: a.code,
            currency: a.currency,
            scale: a.scale,
            normal_balance: a.normal_balance.to_pb(),
            allow_negative: a.allow_negative,
            metadata: a.metadata.into_iter().collect(),
        };
        let r = self
            .calls
            .call(req, |mut c, r| async move { c.create_account(r).await })
            .await?;
        let account = answered_account(r.account)?;
        self.remember(&account);
        Ok((account, r.created))
    }

    /// An account of this client's ledger by code, with the version of its terms in force
    /// now (read from the ledger on every call: an update may change them; its scale is kept
    /// for the amounts written later).
    pub async fn account(&self, code: &str) -> Result<Account, Error> {
        self.account_as_of(code, AsOf::now()).await
    }

    /// An account with the version of its terms in force at a cut-off: the last version
    /// recorded at or before both of its times (`ACCOUNT_NOT_FOUND` for an account created
    /// after it).
    pub async fn account_as_of(&self, code: &str, as_of: AsOf) -> Result<Account, Error> {
        let req = pb::GetAccountRequest {
            ledger: self.ledger_field()?,
            code: code.into(),
            as_of: as_of.to_pb(),
        };
        let a = self
            .calls
            .call(req, |mut c, r| async move { c.get_account(r).await })
            .await
            .and_then(Account::from_pb)?;
        self.remember(&a);
        Ok(a)
    }

    /// Records the next version of an account's terms, or answers the one already recorded
    /// under its key (`true`: replayed). Refused before anything is sent: a missing key or
    /// reason, no change named, `expected_version` 0, an amount the account cannot carry
    /// exactly. Retried as `post` is, with the same key, only while the outcome is unknown
    /// (`UNAVAILABLE`, `DEADLINE_EXCEEDED`); `ACCOUNT_VERSION_MISMATCH` (`ABORTED`: someone
    /// updated the account since it was read) is an answer, never retried: read the account
    /// again, decide again, and update under a new key.
    ///
    /// ```no_run
    /// # async fn f(ledger: ledger_client::Client) -> Result<(), ledger_client::Error> {
    /// use ledger_client::{AccountStatus, AccountUpdate, Reason};
    /// let alice = ledger.account("wallet:alice").await?;
    /// let why = "fraud review";
    /// let freeze = AccountUpdate::new("freeze/alice/1", "wallet:alice", alice.version, why)
    ///     .status(AccountStatus::Frozen);
    /// match ledger.update_account(freeze).await {
    ///     Ok((frozen, _replayed)) => assert_eq!(frozen.status, AccountStatus::Frozen),
    ///     Err(e) if e.reason() == Some(Reason::AccountVersionMismatch) => { /* read again */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn update_account(&self, u: AccountUpdate) -> Result<(Account, bool), Error> {
        let ledger = self.ledger_field()?;
        u.check()?;
        let req = u.to_pb(ledger, self.scale(&u.code).await?)?;
        let r = self
            .calls
            .call(req, |mut c, r| async move { c.update_account(r).await })
            .await?;
        let account = answered_account(r.account)?;
        self.remember(&account);
        Ok((account, r.replayed))
    }

    /// Every version of an account, oldest first, each the account as it was at that version
    /// with who changed what and why ([`Account::version_info`]); every page.
    pub async fn account_versions(&self, code: &str) -> Result<Vec<Account>, Error> {
        let ledger = self.ledger_field()?;
        let mut versions = Vec::new();
        let mut page_token = String::new();
        loop {
            let req = pb::ListAccountVersionsRequest {
                ledger: ledger.clone(),
                code: code.into(),
                page_size: PAGE_SIZE,
                page_token,
            };
            let page = self
                .calls
                .call(
                    req,
                    |mut c, r| async move { c.list_account_versions(r).await },
                )
                .await?;
            for a in page.versions {
                versions.push(Account::from_pb(a)?);
            }
            if page.next_page_token.is_empty() {
                return Ok(versions);
            }
            page_token = page.next_page_token;
        }
    }
}

/// The account a write answered (an answer without one is no answer this client can read).
fn answered_account(a: Option<pb::Account>) -> Result<Account, Error> {
    a.ok_or_else(|| Error::new(ErrorKind::Invalid, "the ledger answered no account"))
        .and_then(Account::from_pb)
}
