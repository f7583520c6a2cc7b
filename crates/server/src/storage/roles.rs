//! The service's database login: created for the embedded PostgreSQL, and checked at start
//! for powers that would let a session of the service undo what the database enforces.
//!
//! The append-only triggers stop every UPDATE, DELETE and TRUNCATE of the journal, but the
//! owner of a table can disable or drop its triggers, and a superuser can also switch them
//! off for a session (`session_replication_role`). So the service must log in as a role that
//! is not a superuser, has no CREATEROLE (in PostgreSQL 15 it may grant itself any
//! non-superuser role, the owner's too) and is not a member of the owner (or of the owner of
//! the database or schema, who may drop the tables). It gets its rights through `ledger_app`.

use super::{StorageError, APP_ROLE};

/// The login the service's connections use with the embedded PostgreSQL (created by
/// [`ensure_service_login`]; a deployment on its own PostgreSQL makes one like it, see the
/// README's "Database roles").
pub const SERVICE_LOGIN: &str = "ledger_svc";

/// SQL that creates the application role and the service login unless they exist, and puts
/// the login back to its rights if it has others. Roles are cluster-wide, so several
/// databases of one cluster may run this at once: a concurrent creator's role is taken as
/// ours (as migration 0003 does).
fn ensure_service_login_sql() -> String {
    let attributes = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT";
    format!(
        "DO $$
         BEGIN
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
             CREATE ROLE {APP_ROLE} NOLOGIN;
           END IF;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
         END $$;
         DO $$
         BEGIN
           IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{SERVICE_LOGIN}') THEN
             CREATE ROLE {SERVICE_LOGIN} {attributes};
           END IF;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
         END $$;
         DO $$
         BEGIN
           IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{SERVICE_LOGIN}'
                      AND (rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication
                           OR rolbypassrls OR NOT rolcanlogin OR NOT rolinherit)) THEN
             ALTER ROLE {SERVICE_LOGIN} {attributes};
           END IF;
           IF NOT EXISTS (SELECT 1 FROM pg_auth_members
                          WHERE member = '{SERVICE_LOGIN}'::regrole
                            AND roleid = '{APP_ROLE}'::regrole) THEN
             GRANT {APP_ROLE} TO {SERVICE_LOGIN};
           END IF;
         EXCEPTION WHEN unique_violation THEN NULL;
         END $$;"
    )
}

/// Creates [`APP_ROLE`] (`NOLOGIN`) and [`SERVICE_LOGIN`] (`LOGIN`, no SUPERUSER, CREATEROLE,
/// CREATEDB, REPLICATION or BYPASSRLS, a member of `ledger_app`) unless they exist. Needs a
/// superuser (or CREATEROLE) session: the embedded PostgreSQL's `postgres`.
pub async fn ensure_service_login(client: &tokio_postgres::Client) -> Result<(), StorageError> {
    client.batch_execute(&ensure_service_login_sql()).await?;
    Ok(())
}

/// What the session's login could do beyond its grants.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoginPowers {
    /// The login (`session_user`: what `RESET ROLE` returns to).
    pub login: String,
    pub superuser: bool,
    pub createrole: bool,
    /// It owns the journal's tables (so it may disable or drop their triggers), the database
    /// or the schema `public` (so it may drop the tables).
    pub is_owner: bool,
    /// Roles it may `SET ROLE` to that are superusers or own the journal, the database or
    /// its schema.
    pub can_become: Vec<String>,
}

/// Reads the session's [`LoginPowers`].
pub async fn login_powers(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<LoginPowers, StorageError> {
    let row = client
        .query_one(
            "WITH owners AS (
               SELECT relowner AS oid FROM pg_class WHERE oid = to_regclass('postings')
               UNION SELECT datdba FROM pg_database WHERE datname = current_database()
               UNION SELECT nspowner FROM pg_namespace WHERE nspname = 'public')
             SELECT r.rolname::text, r.rolsuper, r.rolcreaterole,
                    r.oid IN (SELECT oid FROM owners),
                    ARRAY(SELECT o.rolname::text FROM pg_roles o
                          WHERE o.oid <> r.oid AND pg_has_role(r.oid, o.oid, 'MEMBER')
                            AND (o.rolsuper OR o.oid IN (SELECT oid FROM owners))
                          ORDER BY 1)
             FROM pg_roles r WHERE r.rolname = session_user",
            &[],
        )
        .await?;
    Ok(LoginPowers {
        login: row.get(0),
        superuser: row.get(1),
        createrole: row.get(2),
        is_owner: row.get(3),
        can_become: row.get(4),
    })
}

/// The warning for a login that could disable the journal's triggers, or `None`.
pub fn escalation_warning(powers: &LoginPowers) -> Option<String> {
    let why = if powers.superuser {
        "is a superuser".to_owned()
    } else if powers.is_owner {
        "owns the journal's tables, their database or their schema".to_owned()
    } else if powers.createrole {
        "has CREATEROLE (it may grant itself the owner's role)".to_owned()
    } else if !powers.can_become.is_empty() {
        format!("may SET ROLE to {}", powers.can_become.join(", "))
    } else {
        return None;
    };
    Some(format!(
        "the service's database login `{}` {why}: a session of the service could disable or \
         drop the journal's append-only triggers. Log in as a role without SUPERUSER or \
         CREATEROLE that cannot become the owner, a member of {APP_ROLE} (README \"Database \
         roles\")",
        powers.login
    ))
}

/// Logs [`escalation_warning`] for the pool's login at WARN, once, at start.
pub async fn warn_if_login_can_escalate(pool: &super::Pool) {
    let powers = async {
        let client = pool.get().await?;
        login_powers(&client).await
    };
    match powers.await {
        Ok(powers) => {
            if let Some(warning) = escalation_warning(&powers) {
                tracing::warn!(login = %powers.login, "{warning}");
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot read the powers of the service's login"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_without_powers_gets_no_warning_and_each_power_is_named() {
        let plain = LoginPowers {
            login: SERVICE_LOGIN.into(),
            ..Default::default()
        };
        assert_eq!(escalation_warning(&plain), None);
        let cases = [
            (
                LoginPowers {
                    superuser: true,
                    ..plain.clone()
                },
                "is a superuser",
            ),
            (
                LoginPowers {
                    is_owner: true,
                    ..plain.clone()
                },
                "owns the journal's tables",
            ),
            (
                LoginPowers {
                    createrole: true,
                    ..plain.clone()
                },
                "CREATEROLE",
            ),
            (
                LoginPowers {
                    can_become: vec!["owner".into()],
                    ..plain.clone()
                },
                "may SET ROLE to owner",
            ),
        ];
        for (powers, says) in cases {
            let warning = escalation_warning(&powers).expect("a warning");
            assert!(warning.contains(says), "{warning}");
            assert!(warning.contains("`ledger_svc`"), "{warning}");
        }
    }
}
