//! The gateway's nftables table as data, rendered two ways from one description:
//! as an nftables JSON batch (what `install` applies) and as nft syntax (what
//! `config/nftables.nft` ships). Both renderers walk the same [`Ruleset`], so a rule
//! cannot exist in one and not in the other; an integration test loads both into
//! the kernel and compares what the kernel holds.
//!
//! Nothing here runs a command.

use std::borrow::Cow;
use std::fmt::Write as _;

use ipnet::IpNet;
use nftables::batch::Batch;
use nftables::expr::{
    Expression, Fib, FibFlag, FibResult, Meta, MetaKey, NamedExpression, Payload, PayloadField,
    SetItem, Socket, SocketAttr,
};
use nftables::schema::{self, NfListObject, Nftables, SetFlag, SetType, SetTypeValue};
use nftables::stmt::{AnonymousCounter, Counter, JumpTarget, Mangle, Match, Operator, Statement};
use nftables::types::{NfChainPolicy, NfChainType, NfFamily, NfHook};

use crate::config::{GatewayConfig, InterceptConfig};

/// The base chain, hooked at prerouting.
pub(crate) const PREROUTING_CHAIN: &str = "prerouting";
/// The regular chain that decides, for TCP to an intercepted port, what happens.
pub(crate) const INTERCEPT_CHAIN: &str = "intercept";
/// The base chain, hooked at input, that keeps the listening port closed to
/// direct connections.
pub(crate) const INPUT_CHAIN: &str = "input";
/// Priority of the prerouting chain: `mangle` (-150), before conntrack's NAT
/// (-100) rewrites destinations, as TPROXY requires.
const PRIORITY_MANGLE: i32 = -150;
/// Priority of the input chain: `filter` (0).
const PRIORITY_FILTER: i32 = 0;

/// Where a base chain hooks in, for both renderers.
#[derive(Debug, Clone, Copy)]
struct BaseChain {
    hook: NfHook,
    priority: i32,
    /// `<hook> priority <name>` in nft syntax.
    text: &'static str,
}

/// The table's chains in order; `None` for a regular chain (jumped to).
const CHAINS: [(&str, Option<BaseChain>); 3] = [
    (
        PREROUTING_CHAIN,
        Some(BaseChain {
            hook: NfHook::Prerouting,
            priority: PRIORITY_MANGLE,
            text: "prerouting priority mangle",
        }),
    ),
    (INTERCEPT_CHAIN, None),
    (
        INPUT_CHAIN,
        Some(BaseChain {
            hook: NfHook::Input,
            priority: PRIORITY_FILTER,
            text: "input priority filter",
        }),
    ),
];

/// The named address sets. Named, and one per address family, so that
/// `nft add element` can extend them at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddressSet {
    /// IPv4 clients never intercepted (source addresses).
    ClientsV4,
    /// IPv6 clients never intercepted.
    ClientsV6,
    /// IPv4 destinations never intercepted.
    DestinationsV4,
    /// IPv6 destinations never intercepted.
    DestinationsV6,
    /// IPv4 destinations of the configured origins (`[[origin]] destinations`):
    /// the only ones whose TLS port is intercepted.
    OriginsV4,
    /// IPv6 destinations of the configured origins.
    OriginsV6,
}

impl AddressSet {
    /// The bypass sets, in the order the table declares them.
    pub(crate) const BYPASS: [AddressSet; 4] = [
        AddressSet::ClientsV4,
        AddressSet::ClientsV6,
        AddressSet::DestinationsV4,
        AddressSet::DestinationsV6,
    ];

    /// The origins' destination sets, declared only with `intercept.tls_port`.
    pub(crate) const ORIGINS: [AddressSet; 2] = [AddressSet::OriginsV4, AddressSet::OriginsV6];

    /// The set's name inside the table.
    pub(crate) fn name(self) -> &'static str {
        match self {
            AddressSet::ClientsV4 => "bypass_clients_v4",
            AddressSet::ClientsV6 => "bypass_clients_v6",
            AddressSet::DestinationsV4 => "bypass_destinations_v4",
            AddressSet::DestinationsV6 => "bypass_destinations_v6",
            AddressSet::OriginsV4 => "origin_destinations_v4",
            AddressSet::OriginsV6 => "origin_destinations_v6",
        }
    }

    fn is_v6(self) -> bool {
        matches!(
            self,
            AddressSet::ClientsV6 | AddressSet::DestinationsV6 | AddressSet::OriginsV6
        )
    }

    fn is_clients(self) -> bool {
        matches!(self, AddressSet::ClientsV4 | AddressSet::ClientsV6)
    }

    /// `ip`/`ip6` and `saddr`/`daddr`: the header field the set is matched against.
    fn payload(self) -> (&'static str, &'static str) {
        let protocol = if self.is_v6() { "ip6" } else { "ip" };
        let field = if self.is_clients() { "saddr" } else { "daddr" };
        (protocol, field)
    }

    fn nft_type(self) -> (SetType, &'static str) {
        if self.is_v6() {
            (SetType::Ipv6Addr, "ipv6_addr")
        } else {
            (SetType::Ipv4Addr, "ipv4_addr")
        }
    }

    /// The configured networks of this set's family, merged. Interval sets reject
    /// overlapping elements, and a configuration may well list 10.0.0.0/8 beside
    /// 10.1.0.0/16 (or two origins overlapping destinations); merging first makes
    /// that a non-event.
    fn elements(self, config: &GatewayConfig) -> Vec<IpNet> {
        let source: Vec<&IpNet> = match self {
            AddressSet::ClientsV4 | AddressSet::ClientsV6 => config.bypass.clients.iter().collect(),
            AddressSet::DestinationsV4 | AddressSet::DestinationsV6 => {
                config.bypass.destinations.iter().collect()
            }
            AddressSet::OriginsV4 | AddressSet::OriginsV6 => config
                .origins
                .iter()
                .flat_map(|o| o.destinations.iter())
                .collect(),
        };
        let mine: Vec<IpNet> = source
            .into_iter()
            .filter(|n| matches!(n, IpNet::V6(_)) == self.is_v6())
            .map(IpNet::trunc)
            .collect();
        IpNet::aggregate(&mine)
    }

    fn comment(self) -> &'static str {
        match self {
            AddressSet::ClientsV4 | AddressSet::ClientsV6 => "clients never intercepted",
            AddressSet::DestinationsV4 | AddressSet::DestinationsV6 => {
                "destinations never intercepted"
            }
            AddressSet::OriginsV4 | AddressSet::OriginsV6 => {
                "destinations of the origins, the only ones whose TLS is intercepted"
            }
        }
    }
}

/// One rule, in a form both renderers understand.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Rule {
    /// prerouting: TCP from the LAN to an intercepted port enters the intercept
    /// chain; everything else leaves the table at once, after one rule (two
    /// more with `intercept.tls_port`).
    Divert {
        /// LAN interfaces; empty means every interface but loopback.
        lan_interfaces: Vec<String>,
        ports: Vec<u16>,
        /// Only to destinations in this set: the TLS port, which is
        /// intercepted for the origins' destinations alone.
        only_to: Option<AddressSet>,
    },
    /// The gateway's own upstream sockets carry `SO_MARK = upstream_mark`.
    OwnTraffic { upstream_mark: u32 },
    /// Later packets of a flow already handed to a transparent socket: mark them
    /// so that the policy route delivers them locally too.
    Established { tproxy_mark: u32 },
    /// Connections to one of this host's own addresses.
    LocalDestination,
    /// A bypass set.
    Bypass(AddressSet),
    /// New flows: hand them to the listener.
    Tproxy {
        v6: bool,
        port: u16,
        tproxy_mark: u32,
    },
    /// input: connections made to the listening port itself, from any side.
    /// TPROXY'd packets keep the port the browser dialled (never `listen.port`,
    /// `validate()` sees to that), so only direct connections match; served,
    /// they would make the gateway forward to itself.
    ListenerClosed { port: u16 },
}

impl Rule {
    fn chain(&self) -> &'static str {
        match self {
            Rule::Divert { .. } => PREROUTING_CHAIN,
            Rule::ListenerClosed { .. } => INPUT_CHAIN,
            _ => INTERCEPT_CHAIN,
        }
    }

    /// Stored in the kernel with the rule, so `nft list ruleset` explains itself.
    fn comment(&self) -> &'static str {
        match self {
            Rule::Divert { only_to: None, .. } => "TCP from the LAN to an intercepted port",
            Rule::Divert {
                only_to: Some(_), ..
            } => "TLS from the LAN to an origin's destination",
            Rule::OwnTraffic { .. } => "the gateway's own upstream connections",
            Rule::Established { .. } => "later packets of intercepted flows",
            Rule::LocalDestination => "connections to this host itself",
            Rule::Bypass(set) => set.comment(),
            Rule::Tproxy { v6: false, .. } => "new IPv4 flows to the gateway",
            Rule::Tproxy { v6: true, .. } => "new IPv6 flows to the gateway",
            Rule::ListenerClosed { .. } => "direct connections to the transparent listener",
        }
    }

    fn statements(&self) -> Vec<Statement<'static>> {
        match self {
            Rule::Divert {
                lan_interfaces,
                ports,
                only_to,
            } => {
                let interfaces = if lan_interfaces.is_empty() {
                    matches(meta(MetaKey::Iifname), Operator::NEQ, string("lo"))
                } else {
                    matches(
                        meta(MetaKey::Iifname),
                        Operator::EQ,
                        one_or_set(lan_interfaces.iter().map(|i| string(i))),
                    )
                };
                let mut statements = vec![
                    interfaces,
                    matches(
                        payload("tcp", "dport"),
                        Operator::EQ,
                        one_or_set(ports.iter().map(|&p| Expression::Number(p.into()))),
                    ),
                ];
                if let Some(set) = only_to {
                    statements.push(in_set(*set));
                }
                statements.push(Statement::Jump(JumpTarget {
                    target: INTERCEPT_CHAIN.into(),
                }));
                statements
            }
            Rule::OwnTraffic { upstream_mark } => vec![
                matches(
                    meta(MetaKey::Mark),
                    Operator::EQ,
                    Expression::Number(*upstream_mark),
                ),
                Statement::Return(None),
            ],
            Rule::Established { tproxy_mark } => vec![
                matches(
                    Expression::Named(NamedExpression::Socket(Socket {
                        key: Cow::Owned(SocketAttr::Transparent),
                    })),
                    Operator::EQ,
                    Expression::Number(1),
                ),
                set_mark(*tproxy_mark),
                counter(),
                Statement::Accept(None),
            ],
            Rule::LocalDestination => vec![
                matches(
                    Expression::Named(NamedExpression::Fib(Fib {
                        result: FibResult::Type,
                        flags: [FibFlag::Daddr].into_iter().collect(),
                    })),
                    Operator::EQ,
                    string("local"),
                ),
                Statement::Return(None),
            ],
            Rule::Bypass(set) => vec![in_set(*set), Statement::Return(None)],
            Rule::Tproxy {
                v6,
                port,
                tproxy_mark,
            } => vec![
                // TPROXY needs the transport protocol matched in its own rule.
                matches(meta(MetaKey::L4proto), Operator::EQ, string("tcp")),
                Statement::TProxy(nftables::stmt::TProxy {
                    family: Some(if *v6 { "ip6" } else { "ip" }.into()),
                    port: *port,
                    addr: None,
                }),
                set_mark(*tproxy_mark),
                counter(),
                Statement::Accept(None),
            ],
            Rule::ListenerClosed { port } => vec![
                matches(
                    payload("tcp", "dport"),
                    Operator::EQ,
                    Expression::Number((*port).into()),
                ),
                counter(),
                Statement::Drop(None),
            ],
        }
    }

    /// The rule in nft syntax, without indentation or comment.
    fn text(&self) -> String {
        match self {
            Rule::Divert {
                lan_interfaces,
                ports,
                only_to,
            } => {
                let interfaces = if lan_interfaces.is_empty() {
                    "iifname != \"lo\"".to_owned()
                } else {
                    let names = lan_interfaces.iter().map(|i| format!("\"{i}\""));
                    format!("iifname {}", one_or_set_text(names))
                };
                let ports = one_or_set_text(ports.iter().map(u16::to_string));
                let only_to = only_to.map_or(String::new(), |set| format!(" {}", in_set_text(set)));
                format!("{interfaces} tcp dport {ports}{only_to} jump {INTERCEPT_CHAIN}")
            }
            Rule::OwnTraffic { upstream_mark } => {
                format!("meta mark {} return", mark_text(*upstream_mark))
            }
            Rule::Established { tproxy_mark } => format!(
                "socket transparent 1 meta mark set {} counter accept",
                mark_text(*tproxy_mark)
            ),
            Rule::LocalDestination => "fib daddr type local return".to_owned(),
            Rule::Bypass(set) => format!("{} return", in_set_text(*set)),
            Rule::Tproxy {
                v6,
                port,
                tproxy_mark,
            } => format!(
                "meta l4proto tcp tproxy {} to :{port} meta mark set {} counter accept",
                if *v6 { "ip6" } else { "ip" },
                mark_text(*tproxy_mark)
            ),
            Rule::ListenerClosed { port } => format!("tcp dport {port} counter drop"),
        }
    }
}

/// The whole table for one configuration.
#[derive(Debug, Clone)]
pub(crate) struct Ruleset {
    table: String,
    sets: Vec<(AddressSet, Vec<IpNet>)>,
    rules: Vec<Rule>,
}

impl Ruleset {
    pub(crate) fn new(config: &GatewayConfig) -> Self {
        let i = &config.intercept;
        let mut rules = divert_rules(i);
        rules.extend([
            // Cheapest test first; it is also the loop guard.
            Rule::OwnTraffic {
                upstream_mark: i.upstream_mark,
            },
            // Before the bypass sets: a set changed at run time then applies to new
            // flows only, instead of cutting flows the gateway already holds (their
            // packets would be forwarded to a server that never saw the handshake).
            Rule::Established {
                tproxy_mark: i.tproxy_mark,
            },
            Rule::LocalDestination,
        ]);
        rules.extend(AddressSet::BYPASS.map(Rule::Bypass));
        for v6 in [false, true] {
            rules.push(Rule::Tproxy {
                v6,
                port: config.listen.port,
                tproxy_mark: i.tproxy_mark,
            });
        }
        rules.push(Rule::ListenerClosed {
            port: config.listen.port,
        });
        Ruleset {
            table: i.table.clone(),
            sets: declared_sets(config)
                .map(|set| (set, set.elements(config)))
                .collect(),
            rules,
        }
    }

    /// The table object, for deletion and look-ups.
    pub(crate) fn table(&self) -> schema::Table<'static> {
        table_object(&self.table)
    }

    /// One atomic batch that replaces any table of the same name (a leftover of a
    /// crashed run) with this one. `add table` before `delete table` makes the
    /// delete succeed whether or not a leftover exists; nft applies the whole
    /// batch as one transaction, so no packet sees a half-built table.
    pub(crate) fn to_batch(&self) -> Nftables<'static> {
        let mut batch = Batch::new();
        batch.add(NfListObject::Table(self.table()));
        batch.delete(NfListObject::Table(self.table()));
        batch.add(NfListObject::Table(self.table()));
        for (set, elements) in &self.sets {
            let (set_type, _) = set.nft_type();
            batch.add(NfListObject::Set(Box::new(schema::Set {
                family: NfFamily::INet,
                table: self.table.clone().into(),
                name: set.name().into(),
                set_type: SetTypeValue::Single(set_type),
                flags: Some([SetFlag::Interval].into_iter().collect()),
                elem: (!elements.is_empty()).then(|| {
                    elements
                        .iter()
                        .map(|net| {
                            Expression::Named(NamedExpression::Prefix(nftables::expr::Prefix {
                                addr: Box::new(string(&net.network().to_string())),
                                len: net.prefix_len().into(),
                            }))
                        })
                        .collect::<Vec<_>>()
                        .into()
                }),
                ..schema::Set::default()
            })));
        }
        for (name, base) in CHAINS {
            batch.add(NfListObject::Chain(schema::Chain {
                family: NfFamily::INet,
                table: self.table.clone().into(),
                name: name.into(),
                _type: base.map(|_| NfChainType::Filter),
                hook: base.map(|b| b.hook),
                prio: base.map(|b| b.priority),
                policy: base.map(|_| NfChainPolicy::Accept),
                ..schema::Chain::default()
            }));
        }
        for rule in &self.rules {
            batch.add(NfListObject::Rule(schema::Rule {
                family: NfFamily::INet,
                table: self.table.clone().into(),
                chain: rule.chain().into(),
                expr: rule.statements().into(),
                comment: Some(rule.comment().into()),
                ..schema::Rule::default()
            }));
        }
        batch.to_nftables()
    }

    /// The table in nft syntax, as `nft -f` loads it: again a replace of any table
    /// of the same name, in one transaction.
    pub(crate) fn to_text(&self) -> String {
        let t = &self.table;
        let mut out = String::new();
        // Writing to a String cannot fail; the results are ignored for that reason.
        let _ = writeln!(out, "table inet {t}\ndelete table inet {t}\n");
        let _ = writeln!(out, "table inet {t} {{");
        for (set, elements) in &self.sets {
            let (_, type_name) = set.nft_type();
            let _ = writeln!(out, "\tset {} {{", set.name());
            let _ = writeln!(out, "\t\ttype {type_name}");
            let _ = writeln!(out, "\t\tflags interval");
            if !elements.is_empty() {
                let list: Vec<String> = elements.iter().map(IpNet::to_string).collect();
                let _ = writeln!(out, "\t\telements = {{ {} }}", list.join(", "));
            }
            let _ = writeln!(out, "\t}}\n");
        }
        for (n, (chain, base)) in CHAINS.into_iter().enumerate() {
            if n > 0 {
                out.push('\n');
            }
            let _ = writeln!(out, "\tchain {chain} {{");
            if let Some(base) = base {
                let _ = writeln!(out, "\t\ttype filter hook {}; policy accept;", base.text);
            }
            for rule in self.rules.iter().filter(|r| r.chain() == chain) {
                let _ = writeln!(out, "\t\t{} comment \"{}\"", rule.text(), rule.comment());
            }
            let _ = writeln!(out, "\t}}");
        }
        out.push_str("}\n");
        out
    }
}

/// The prerouting rules. The plain ports go to the intercept chain for every
/// destination; the TLS port (`intercept.tls_port`) only for the origins'
/// destinations, one rule per family, so that HTTPS to anywhere else never
/// enters the intercept chain: it is routed exactly as without the gateway.
fn divert_rules(i: &InterceptConfig) -> Vec<Rule> {
    let plain: Vec<u16> = i
        .ports
        .iter()
        .copied()
        .filter(|&p| Some(p) != i.tls_port)
        .collect();
    let mut rules = Vec::new();
    if !plain.is_empty() {
        rules.push(Rule::Divert {
            lan_interfaces: i.lan_interfaces.clone(),
            ports: plain,
            only_to: None,
        });
    }
    if let Some(port) = i.tls_port {
        rules.extend(AddressSet::ORIGINS.map(|set| Rule::Divert {
            lan_interfaces: i.lan_interfaces.clone(),
            ports: vec![port],
            only_to: Some(set),
        }));
    }
    rules
}

/// The sets the table declares: the bypass sets always, the origins' only
/// when a TLS port is intercepted.
fn declared_sets(config: &GatewayConfig) -> impl Iterator<Item = AddressSet> {
    let origins: &[AddressSet] = if config.intercept.tls_port.is_some() {
        &AddressSet::ORIGINS
    } else {
        &[]
    };
    AddressSet::BYPASS
        .into_iter()
        .chain(origins.iter().copied())
}

/// `ip daddr @set` and its kind, as a match.
fn in_set(set: AddressSet) -> Statement<'static> {
    let (protocol, field) = set.payload();
    matches(
        payload(protocol, field),
        Operator::EQ,
        string(&format!("@{}", set.name())),
    )
}

fn in_set_text(set: AddressSet) -> String {
    let (protocol, field) = set.payload();
    format!("{protocol} {field} @{}", set.name())
}

pub(crate) fn table_object(name: &str) -> schema::Table<'static> {
    schema::Table {
        family: NfFamily::INet,
        name: name.to_owned().into(),
        handle: None,
    }
}

/// Marks as nft prints them, so the shipped file reads like `nft list ruleset`.
fn mark_text(mark: u32) -> String {
    format!("{mark:#010x}")
}

fn one_or_set_text(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    match items.as_slice() {
        [one] => one.clone(),
        many => format!("{{ {} }}", many.join(", ")),
    }
}

fn one_or_set(items: impl Iterator<Item = Expression<'static>>) -> Expression<'static> {
    let mut items: Vec<Expression<'static>> = items.collect();
    if items.len() == 1 {
        items.remove(0)
    } else {
        Expression::Named(NamedExpression::Set(
            items.into_iter().map(SetItem::Element).collect(),
        ))
    }
}

fn string(s: &str) -> Expression<'static> {
    Expression::String(s.to_owned().into())
}

fn meta(key: MetaKey) -> Expression<'static> {
    Expression::Named(NamedExpression::Meta(Meta { key }))
}

fn payload(protocol: &'static str, field: &'static str) -> Expression<'static> {
    Expression::Named(NamedExpression::Payload(Payload::PayloadField(
        PayloadField {
            protocol: protocol.into(),
            field: field.into(),
        },
    )))
}

fn matches(
    left: Expression<'static>,
    op: Operator,
    right: Expression<'static>,
) -> Statement<'static> {
    Statement::Match(Match { left, right, op })
}

fn set_mark(mark: u32) -> Statement<'static> {
    Statement::Mangle(Mangle {
        key: meta(MetaKey::Mark),
        value: Expression::Number(mark),
    })
}

fn counter() -> Statement<'static> {
    Statement::Counter(Counter::Anonymous(Some(AnonymousCounter::default())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule_texts(ruleset: &Ruleset) -> Vec<String> {
        ruleset.rules.iter().map(Rule::text).collect()
    }

    #[test]
    fn default_rules_in_order() {
        let ruleset = Ruleset::new(&GatewayConfig::default());
        assert_eq!(
            rule_texts(&ruleset),
            [
                "iifname != \"lo\" tcp dport 80 jump intercept",
                "meta mark 0x05c70002 return",
                "socket transparent 1 meta mark set 0x05c70001 counter accept",
                "fib daddr type local return",
                "ip saddr @bypass_clients_v4 return",
                "ip6 saddr @bypass_clients_v6 return",
                "ip daddr @bypass_destinations_v4 return",
                "ip6 daddr @bypass_destinations_v6 return",
                "meta l4proto tcp tproxy ip to :3129 meta mark set 0x05c70001 counter accept",
                "meta l4proto tcp tproxy ip6 to :3129 meta mark set 0x05c70001 counter accept",
                "tcp dport 3129 counter drop",
            ]
        );
    }

    #[test]
    fn interfaces_ports_and_sets_follow_the_config() {
        let mut config = GatewayConfig::default();
        config.intercept.lan_interfaces = vec!["lan0".into(), "wlan0".into()];
        config.intercept.ports = vec![80, 8080];
        config.bypass.destinations = [
            "10.0.0.0/8",
            "10.1.0.0/16",
            "2001:db8::1/64",
            "192.0.2.1/32",
        ]
        .iter()
        .map(|s| s.parse().expect("a network"))
        .collect();
        let ruleset = Ruleset::new(&config);
        assert_eq!(
            rule_texts(&ruleset)[0],
            "iifname { \"lan0\", \"wlan0\" } tcp dport { 80, 8080 } jump intercept"
        );
        let text = ruleset.to_text();
        // Merged, host bits cleared, split by family.
        assert!(
            text.contains("elements = { 10.0.0.0/8, 192.0.2.1/32 }"),
            "{text}"
        );
        assert!(text.contains("elements = { 2001:db8::/64 }"), "{text}");
    }

    /// An origin entry from TOML, as an operator writes it.
    fn origin(destinations: &str) -> crate::config::OriginEntry {
        toml::from_str(&format!(
            "name = \"o\"\naddress = \"127.0.0.1:9000\"\ndestinations = {destinations}"
        ))
        .expect("an origin entry")
    }

    #[test]
    fn the_tls_port_is_diverted_only_for_the_origins_destinations() {
        let mut config = GatewayConfig::default();
        config.intercept.ports = vec![80, 443];
        config.intercept.tls_port = Some(443);
        config.origins = vec![
            origin(r#"["203.0.113.0/24", "2001:db8:203::/48"]"#),
            origin(r#"["203.0.113.128/25", "198.51.100.7/32"]"#),
        ];
        let ruleset = Ruleset::new(&config);
        assert_eq!(
            rule_texts(&ruleset)[..3],
            [
                "iifname != \"lo\" tcp dport 80 jump intercept",
                "iifname != \"lo\" tcp dport 443 ip daddr @origin_destinations_v4 jump intercept",
                "iifname != \"lo\" tcp dport 443 ip6 daddr @origin_destinations_v6 jump intercept",
            ]
            .map(String::from)
        );
        // The rest of the table is the same as without a TLS port.
        assert_eq!(
            rule_texts(&ruleset)[3..],
            rule_texts(&Ruleset::new(&GatewayConfig::default()))[1..]
        );
        let text = ruleset.to_text();
        // Every origin's destinations, merged, split by family.
        assert!(
            text.contains(
                "set origin_destinations_v4 {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 198.51.100.7/32, 203.0.113.0/24 }"
            ),
            "{text}"
        );
        assert!(text.contains("elements = { 2001:db8:203::/48 }"), "{text}");
    }

    #[test]
    fn a_tls_port_alone_diverts_nothing_else_and_without_one_there_are_no_origin_sets() {
        let mut config = GatewayConfig::default();
        config.intercept.ports = vec![443];
        config.intercept.tls_port = Some(443);
        let texts = rule_texts(&Ruleset::new(&config));
        assert!(texts[0].contains("@origin_destinations_v4"), "{texts:?}");
        assert!(texts[1].contains("@origin_destinations_v6"), "{texts:?}");
        assert!(!texts[2].contains("dport"), "{texts:?}");
        // No origins: the sets exist, empty, so nothing on 443 is diverted.
        assert!(
            Ruleset::new(&config).to_text().contains(
                "set origin_destinations_v6 {\n\t\ttype ipv6_addr\n\t\tflags interval\n\t}"
            )
        );
        let default = Ruleset::new(&GatewayConfig::default()).to_text();
        assert!(!default.contains("origin_destinations"), "{default}");
    }

    #[test]
    fn batch_replaces_the_table_then_builds_it() {
        let json = serde_json::to_value(Ruleset::new(&GatewayConfig::default()).to_batch())
            .expect("serialisable");
        let objects = json["nftables"].as_array().expect("a list");
        let verbs: Vec<String> = objects
            .iter()
            .map(|o| {
                let (verb, body) = o
                    .as_object()
                    .and_then(|m| m.iter().next())
                    .expect("a command");
                let kind = body
                    .as_object()
                    .and_then(|m| m.keys().next())
                    .expect("an object");
                format!("{verb} {kind}")
            })
            .collect();
        assert_eq!(
            verbs[..3],
            ["add table", "delete table", "add table"].map(String::from)
        );
        assert_eq!(verbs.iter().filter(|v| *v == "add set").count(), 4);
        assert_eq!(verbs.iter().filter(|v| *v == "add chain").count(), 3);
        assert_eq!(verbs.iter().filter(|v| *v == "add rule").count(), 11);
        // The TPROXY statement as nft's JSON schema spells it.
        let text = json.to_string();
        assert!(
            text.contains(r#"{"tproxy":{"family":"ip6","port":3129}}"#),
            "{text}"
        );
    }
}
