//! Policy routing over rtnetlink, for IPv4 and IPv6:
//!
//! ```text
//! ip rule add fwmark <tproxy_mark> lookup <route_table> priority <rule_priority>
//! ip route add local 0.0.0.0/0 dev lo table <route_table>
//! ip -6 rule add fwmark <tproxy_mark> lookup <route_table> priority <rule_priority>
//! ip -6 route add local ::/0 dev lo table <route_table>
//! ```
//!
//! A TPROXY'd packet keeps its foreign destination address; without these the
//! kernel would forward it instead of delivering it to the listener.
//!
//! Removal dumps the rules and the table and deletes only entries that match all
//! of ours (mark, table, priority; local default routes on `lo`), so it is
//! idempotent and leaves other people's rules alone.

use std::future::Future;
use std::net::{Ipv4Addr, Ipv6Addr};

use futures_util::TryStreamExt as _;
use rtnetlink::packet_route::route::{
    RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use rtnetlink::packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use rtnetlink::{Handle, IpVersion, RouteMessageBuilder};

use super::InterceptError;
use crate::config::InterceptConfig;

/// `lo` has index 1 in every network namespace (`LOOPBACK_IFINDEX` in the kernel).
const LOOPBACK_IFINDEX: u32 = 1;

/// What the policy routing consists of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PolicyRouting {
    mark: u32,
    table: u32,
    priority: u32,
}

/// How many entries a removal deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RoutingRemoved {
    pub(crate) rules: usize,
    pub(crate) routes: usize,
}

impl PolicyRouting {
    pub(crate) fn new(config: &InterceptConfig) -> Self {
        PolicyRouting {
            mark: config.tproxy_mark,
            table: config.route_table,
            priority: config.rule_priority,
        }
    }

    /// Adds the routes, then the rules that use them, for both families.
    pub(crate) fn install(self) -> Result<(), InterceptError> {
        with_netlink(move |handle| async move {
            let v4 = RouteMessageBuilder::<Ipv4Addr>::new()
                .destination_prefix(Ipv4Addr::UNSPECIFIED, 0)
                .table_id(self.table)
                .kind(RouteType::Local)
                .scope(RouteScope::Host)
                .output_interface(LOOPBACK_IFINDEX)
                .build();
            let v6 = RouteMessageBuilder::<Ipv6Addr>::new()
                .destination_prefix(Ipv6Addr::UNSPECIFIED, 0)
                .table_id(self.table)
                .kind(RouteType::Local)
                .scope(RouteScope::Host)
                .output_interface(LOOPBACK_IFINDEX)
                .build();
            for route in [v4, v6] {
                handle
                    .route()
                    .add(route)
                    .execute()
                    .await
                    .map_err(|e| netlink_error("adding the local default route", e))?;
            }
            let rule = || {
                handle
                    .rule()
                    .add()
                    .fw_mark(self.mark)
                    .table_id(self.table)
                    .priority(self.priority)
                    .action(RuleAction::ToTable)
            };
            rule()
                .v4()
                .execute()
                .await
                .map_err(|e| netlink_error("adding the IPv4 policy rule", e))?;
            rule()
                .v6()
                .execute()
                .await
                .map_err(|e| netlink_error("adding the IPv6 policy rule", e))?;
            Ok(())
        })
    }

    /// Deletes every rule and route of ours, in both families; absent ones are
    /// no error.
    pub(crate) fn remove(self) -> Result<RoutingRemoved, InterceptError> {
        with_netlink(move |handle| async move {
            let (rules, routes) = self.ours(&handle).await?;
            let mut removed = RoutingRemoved::default();
            for rule in rules {
                if ignore_absent(handle.rule().del(rule).execute().await)
                    .map_err(|e| netlink_error("deleting a policy rule", e))?
                {
                    removed.rules += 1;
                }
            }
            for route in routes {
                if ignore_absent(handle.route().del(route).execute().await)
                    .map_err(|e| netlink_error("deleting a route", e))?
                {
                    removed.routes += 1;
                }
            }
            Ok(removed)
        })
    }

    /// How many rules and routes of ours exist now, in both families.
    pub(crate) fn present(self) -> Result<RoutingRemoved, InterceptError> {
        with_netlink(move |handle| async move {
            let (rules, routes) = self.ours(&handle).await?;
            Ok(RoutingRemoved {
                rules: rules.len(),
                routes: routes.len(),
            })
        })
    }

    /// Dumps the rules and our routing table of both families and keeps what
    /// is ours.
    async fn ours(
        self,
        handle: &Handle,
    ) -> Result<(Vec<RuleMessage>, Vec<RouteMessage>), InterceptError> {
        let mut ours = (Vec::new(), Vec::new());
        for version in [IpVersion::V4, IpVersion::V6] {
            let rules: Vec<RuleMessage> = handle
                .rule()
                .get(version)
                .execute()
                .try_collect()
                .await
                .map_err(|e| netlink_error("listing policy rules", e))?;
            ours.0
                .extend(rules.into_iter().filter(|r| self.is_our_rule(r)));
        }
        // Under strict checking the kernel filters a dump by the header's
        // table, protocol and type; the builder's defaults (static, unicast)
        // would hide our local routes.
        let queries = [
            RouteMessageBuilder::<Ipv4Addr>::new()
                .table_id(self.table)
                .protocol(RouteProtocol::Unspec)
                .kind(RouteType::Unspec)
                .build(),
            RouteMessageBuilder::<Ipv6Addr>::new()
                .table_id(self.table)
                .protocol(RouteProtocol::Unspec)
                .kind(RouteType::Unspec)
                .build(),
        ];
        for query in queries {
            let routes: Vec<RouteMessage> = handle
                .route()
                .get(query)
                .execute()
                .try_collect()
                .await
                .map_err(|e| netlink_error("listing routes", e))?;
            ours.1
                .extend(routes.into_iter().filter(|r| self.is_our_route(r)));
        }
        Ok(ours)
    }

    fn is_our_rule(&self, rule: &RuleMessage) -> bool {
        let mut table = u32::from(rule.header.table);
        let (mut mark, mut priority) = (None, None);
        for attribute in &rule.attributes {
            match attribute {
                RuleAttribute::Table(t) => table = *t,
                RuleAttribute::FwMark(m) => mark = Some(*m),
                RuleAttribute::Priority(p) => priority = Some(*p),
                _ => {}
            }
        }
        rule.header.action == RuleAction::ToTable
            && table == self.table
            && mark == Some(self.mark)
            && priority == Some(self.priority)
    }

    fn is_our_route(&self, route: &RouteMessage) -> bool {
        let mut table = u32::from(route.header.table);
        let mut oif = None;
        for attribute in &route.attributes {
            match attribute {
                RouteAttribute::Table(t) => table = *t,
                RouteAttribute::Oif(i) => oif = Some(*i),
                _ => {}
            }
        }
        table == self.table
            && route.header.kind == RouteType::Local
            && route.header.destination_prefix_length == 0
            && oif == Some(LOOPBACK_IFINDEX)
    }
}

/// Runs `task` with a netlink handle, on a thread of its own with a private
/// single-threaded runtime.
///
/// `install` and `remove` are synchronous (start-up, shutdown, `Drop`); a private
/// thread lets them work whether or not the caller is inside a tokio runtime,
/// where `block_on` would panic. The netlink socket is opened on that thread,
/// which inherits the caller's network namespace.
fn with_netlink<T, F, Fut>(task: F) -> Result<T, InterceptError>
where
    F: FnOnce(Handle) -> Fut + Send,
    Fut: Future<Output = Result<T, InterceptError>>,
    T: Send,
{
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .map_err(|source| InterceptError::Netlink {
                    action: "starting the netlink runtime",
                    source: source.into(),
                })?;
            runtime.block_on(async move {
                // Strict checking makes the kernel filter route dumps by table.
                let (connection, handle, _) = rtnetlink::new_connection_with_strict_check()
                    .map_err(|source| InterceptError::Netlink {
                        action: "opening a netlink socket",
                        source: source.into(),
                    })?;
                let driver = tokio::spawn(connection);
                let result = task(handle).await;
                driver.abort();
                result
            })
        });
        match worker.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Deleting something that vanished meanwhile is success; says whether this call
/// deleted it.
fn ignore_absent(result: Result<(), rtnetlink::Error>) -> Result<bool, rtnetlink::Error> {
    match result {
        Ok(()) => Ok(true),
        Err(rtnetlink::Error::NetlinkError(e))
            if e.raw_code().abs() == libc::ENOENT || e.raw_code().abs() == libc::ESRCH =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

fn netlink_error(action: &'static str, error: rtnetlink::Error) -> InterceptError {
    match error {
        rtnetlink::Error::NetlinkError(e)
            if e.raw_code().abs() == libc::EPERM || e.raw_code().abs() == libc::EACCES =>
        {
            InterceptError::PermissionDenied {
                what: "policy routing",
            }
        }
        rtnetlink::Error::NetlinkError(e) => InterceptError::Netlink {
            action,
            source: e.to_io().into(),
        },
        other => InterceptError::Netlink {
            action,
            source: Box::new(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_rules_matching_mark_table_and_priority_are_ours() {
        let ours = PolicyRouting::new(&InterceptConfig::default());
        let rule = |mark: u32, table: u32, priority: u32| {
            let mut message = RuleMessage::default();
            message.header.action = RuleAction::ToTable;
            message.attributes = vec![
                RuleAttribute::FwMark(mark),
                RuleAttribute::Table(table),
                RuleAttribute::Priority(priority),
            ];
            message
        };
        assert!(ours.is_our_rule(&rule(ours.mark, ours.table, ours.priority)));
        assert!(!ours.is_our_rule(&rule(ours.mark + 1, ours.table, ours.priority)));
        assert!(!ours.is_our_rule(&rule(ours.mark, 254, ours.priority)));
        assert!(!ours.is_our_rule(&rule(ours.mark, ours.table, 32766)));
    }
}
