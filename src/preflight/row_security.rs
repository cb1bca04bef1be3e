//! Whether the defence of a shared outbox is on for this run: the row security of
//! `crm.outbox` (`sql/015_outbox_row_security.sql`), under which the job's roles reach
//! only the rows of the types the table's owner listed in
//! `crm.booking_expiration_outbox_type`. Said in one log line (`RowSecurity=on`, `off`
//! or `not-binding`); a run whose outbox types the policies hide from its role fails
//! with 78 before any work, naming the statement that lists them.

use anyhow::Result;
use log::{info, warn};

use crate::domain::OutboxTypes;
use crate::exit::{Failure, fail};
use crate::store::{self, RowSecurity};

/// How the defence stands for this session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Defence {
    /// Row security is on and narrows this role to the listed types.
    On,
    /// Row security is off on `crm.outbox` (or migration 15 is not applied).
    Off,
    /// Row security is on, but does not narrow this role: the table's owner, a
    /// superuser, a BYPASSRLS role, or a role none of the job's group roles.
    NotBinding,
}

impl Defence {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Defence::On => "on",
            Defence::Off => "off",
            Defence::NotBinding => "not-binding",
        }
    }

    fn of(facts: &RowSecurity) -> Self {
        if facts.narrows() {
            Defence::On
        } else if facts.enabled {
            Defence::NotBinding
        } else {
            Defence::Off
        }
    }
}

/// The outbox types of `wanted` the listed types leave out, in `wanted`'s order.
fn hidden<'a>(wanted: &'a OutboxTypes, listed: &[String]) -> Vec<&'a str> {
    wanted
        .as_slice()
        .iter()
        .filter(|t| !listed.contains(t))
        .map(String::as_str)
        .collect()
}

/// Reads and logs how the defence stands for `command`, whose outbox types are
/// `wanted`. Fails with 78 when row security is on for this role and hides some of them.
pub(crate) fn check(
    client: &mut crate::store::Session,
    command: &str,
    wanted: &OutboxTypes,
) -> Result<Defence> {
    let facts = store::row_security(client)?;
    let defence = Defence::of(&facts);
    let listed = facts.types.as_deref().unwrap_or_default();
    let missing = hidden(wanted, listed);
    let types = listed.join(",");
    // run-once writes the job's own type, whatever the flag (it takes none).
    let whose = if command == "run-once" {
        "the cycle writes"
    } else {
        "of --outbox-types"
    };
    match defence {
        Defence::On if !missing.is_empty() => {
            return Err(fail(
                Failure::Config,
                format!(
                    "row security on crm.outbox hides the outbox types {} {whose} from role \
                     {}: its policies let the job's roles reach {}; list them as the \
                     table's owner ({}; see {})",
                    missing.join(", "),
                    facts.role,
                    if types.is_empty() {
                        "no outbox type".to_owned()
                    } else {
                        format!("only {types}")
                    },
                    store::outbox_type_listing(&missing),
                    store::ROW_SECURITY_MIGRATION,
                ),
            ));
        }
        Defence::On => {
            info!(Command = command, RowSecurity = defence.as_str(), Role = facts.role.as_str(),
                  ReachableTypes = types.as_str();
                  "row security on crm.outbox: this role reaches only the rows of its outbox types");
        }
        Defence::NotBinding => {
            warn!(Command = command, RowSecurity = defence.as_str(), Role = facts.role.as_str();
                  "row security on crm.outbox is on but does not narrow this role (the table's \
                   owner, a superuser, a BYPASSRLS role, or none of the job's group roles): it \
                   reaches every producer's rows");
        }
        Defence::Off => {
            info!(Command = command, RowSecurity = defence.as_str(), Role = facts.role.as_str();
                  "row security on crm.outbox is off: the job's roles may reach every \
                   producer's rows (the table's owner enables it; see the deployment guide)");
            if facts.types.is_some() && !missing.is_empty() {
                warn!(Command = command, RowSecurity = defence.as_str(),
                      OutboxTypes = missing.join(",").as_str();
                      "row security on crm.outbox, once on, would hide these outbox types of \
                       --outbox-types from the job's roles: list them as the table's owner ({})",
                      store::outbox_type_listing(&missing));
            }
        }
    }
    Ok(defence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_types_left_out_keep_the_order_given() {
        let wanted = OutboxTypes::parse("c,a,b").unwrap();
        assert_eq!(hidden(&wanted, &["a".to_owned()]), ["c", "b"]);
        assert!(hidden(&wanted, &["a".into(), "b".into(), "c".into()]).is_empty());
    }

    #[test]
    fn the_defence_is_on_only_where_it_narrows_the_role() {
        let facts = |enabled, binds_role, policy_applies| RowSecurity {
            role: "r".into(),
            enabled,
            binds_role,
            policy_applies,
            types: None,
        };
        assert_eq!(Defence::of(&facts(true, true, true)), Defence::On);
        assert_eq!(Defence::of(&facts(true, false, true)), Defence::NotBinding);
        assert_eq!(Defence::of(&facts(true, true, false)), Defence::NotBinding);
        assert_eq!(Defence::of(&facts(false, false, true)), Defence::Off);
    }
}
