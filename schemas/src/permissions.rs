//! The NATS permissions of one member cluster's agent: what the server lets
//! it publish and subscribe to. One pure function, [`agent_permissions`], is
//! the single source of this set: `fleetbus join` writes it into the cluster's
//! user JWT, and `deploy/nats/accounts.conf` lists the same set for static
//! users (a unit test keeps the two equal).
//!
//! The invariant is ARCHITECTURE.md's "each cluster writes only its own
//! subtree", enforced by the server rather than trusted to the agent:
//! - its own subtrees `<p>.{obj,drift,status,conflict,rollout,ver,placement,svc}.<self>.>`;
//! - its own keys of the shared buckets: registry `cluster.<self>.*` and
//!   `kubeconfig.<self>.*`, drift state `<self>.>`, rule status
//!   `status.<self>.>`, beats `beat.<self>.*`;
//! - the JetStream API calls an agent makes, and no others. Streams and
//!   buckets: account info, stream info/names/list, message gets, and the
//!   creation of the fleet's own streams and buckets by name (the layout of
//!   PROTOCOL §3), not of any other stream: a stream a member made up could
//!   capture, say, the command subjects of another cluster and answer its
//!   requests with stream acks. No stream update, delete or purge and no
//!   message delete: those belong to the admin. Consumers: the agent only runs ordered consumers (ephemeral,
//!   server-named, `$JS.API.CONSUMER.CREATE.<stream>`; when the library
//!   recreates one after a gap it names the new one and puts the filter in
//!   the subject, `CONSUMER.CREATE.<stream>.<name>[.<filter>]`), reads their
//!   info and pulls (`CONSUMER.MSG.NEXT.<stream>.<name>`). It never deletes
//!   one: the library's delete of the consumer it replaces is best effort and
//!   the server drops the orphan after its inactivity threshold. So
//!   `CONSUMER.DELETE`, `NAMES`, `LIST`, `PAUSE`, `RESET`, `UNPIN` and leader
//!   step-down are not granted: a member can neither delete nor list another
//!   member's consumers.
//!
//! What the subject space cannot scope (docs/PROTOCOL.md, "Permissions"):
//! consumer names are not per-cluster (server-generated, no prefix
//! wildcards in NATS subjects), so a member may create consumers on any
//! stream (bounded by the account's `consumer` limit), read any consumer's
//! info, and send a create request naming a consumer it learned of (by
//! subscribing widely), which the server applies as an update of the
//! consumer's updatable settings. Reads: an agent subscribes only to its
//! own inbox (`_INBOX_<self>.>`, see [`agent_inbox_prefix`]), the commands
//! addressed to it and stream-creation advisories; what it reads of the
//! streams (the whole registry, every origin's objects) comes through its
//! consumers, so keeping Secrets from members that do not receive them is
//! the job of sealing, not of subject permissions.

use thiserror::Error;

use crate::drift::drift_bucket;
use crate::jetstream::Layout;
use crate::k8s_names::is_dns1123_label;
use crate::registry::{beats_bucket, registry_bucket};
use crate::rule_status::rule_status_bucket;
use crate::subject::{commands_for, owned_subtrees, Prefix};

/// The allow lists of one NATS user (deny lists are not used: a subject not
/// allowed is refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    /// Subjects the user may publish to (NATS wildcards).
    pub publish_allow: Vec<String>,
    /// Subjects the user may subscribe to.
    pub subscribe_allow: Vec<String>,
    /// Whether the user may publish one reply to each request it received
    /// (nats-server's `allow_responses`; JWT `resp`), whatever its reply
    /// subject: how an agent answers a command without publishing rights on
    /// `_INBOX.>`, which would reach every other client's reply inbox.
    pub allow_responses: bool,
}

/// A cluster name that cannot name a NATS user's subtree.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "invalid cluster name {0:?}: want a DNS label (lowercase letters, digits and '-', \
     starting and ending with a letter or digit, at most 63 characters)"
)]
pub struct InvalidClusterName(pub String);

/// Checks that `name` is a DNS-1123 label. This excludes `*`, `>` and `.`, so
/// a name cannot widen a permission subject to other clusters' subtrees.
pub fn check_cluster_name(name: &str) -> Result<(), InvalidClusterName> {
    if is_dns1123_label(name) {
        Ok(())
    } else {
        Err(InvalidClusterName(name.to_owned()))
    }
}

/// The JetStream API subjects every agent needs (independent of its name
/// and of the prefix), besides creating the fleet's streams.
const JS_API: &[&str] = &[
    "$JS.API.INFO",
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.NAMES",
    "$JS.API.STREAM.LIST",
    "$JS.API.STREAM.MSG.GET.*",
    "$JS.API.DIRECT.GET.>",
    "$JS.API.CONSUMER.CREATE.>",
    "$JS.API.CONSUMER.INFO.*.*",
    "$JS.API.CONSUMER.MSG.NEXT.*.*",
    // No `$JS.ACK.>`: the agent's ordered consumers ack nothing, and with it a
    // member could ack the notify bridge's messages (silence its alerts). No
    // `$JS.FC.>`: flow control is a push consumer's, and every read is a pull.
    // Replies to command requesters: `allow_responses`, not `_INBOX.>`.
];

/// The permissions of `cluster`'s agent under subject prefix `prefix`.
pub fn agent_permissions(
    cluster: &str,
    prefix: &Prefix,
) -> Result<Permissions, InvalidClusterName> {
    check_cluster_name(cluster)?;
    let c = cluster;
    let mut publish_allow: Vec<String> = owned_subtrees(prefix, c).into();
    let registry = registry_bucket(prefix);
    publish_allow.extend([
        format!("$KV.{registry}.cluster.{c}.*"),
        format!("$KV.{registry}.kubeconfig.{c}.*"),
        format!("$KV.{}.{c}.>", drift_bucket(prefix)),
        format!("$KV.{}.status.{c}.>", rule_status_bucket(prefix)),
        format!("$KV.{}.beat.{c}.*", beats_bucket(prefix)),
    ]);
    publish_allow.extend(JS_API.iter().map(|s| (*s).to_owned()));
    let streams = Layout::new(prefix.clone(), 1)
        .streams()
        .into_iter()
        .map(|s| s.name);
    let buckets = [
        registry_bucket(prefix),
        beats_bucket(prefix),
        drift_bucket(prefix),
        rule_status_bucket(prefix),
    ]
    .map(|b| format!("KV_{b}"));
    publish_allow.extend(
        streams
            .chain(buckets)
            .map(|name| format!("$JS.API.STREAM.CREATE.{name}")),
    );
    Ok(Permissions {
        publish_allow,
        subscribe_allow: agent_subscriptions(c, prefix),
        allow_responses: true,
    })
}

/// How the streams account shares one subject with the members account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    /// A service: a member's publish (a JetStream API request, a message a
    /// stream captures) is handled in the streams account, and its replies
    /// come back to the member's reply subject. `many` when one request has
    /// many replies (a pull's messages).
    Service {
        /// More than one reply per request.
        many: bool,
    },
    /// A stream: messages published in the streams account (JetStream's
    /// advisories) reach the members' subscribers.
    Stream,
}

/// What the **streams account** exports to the **members account** (and the
/// members account imports; SECURITY.md, "Deliveries a member steers").
///
/// The fleet's streams and buckets live in an account that has no users. A
/// member reaches them only through these imports: its JetStream API
/// requests and its publishes on stream subjects are handled there, and
/// their replies (acks, a pull's messages) come back to its own inbox. A
/// push consumer a member creates delivers *inside the streams account*,
/// where no client subscribes, so the deliver subject nats-server does not
/// check (nats-io/nats-server#8274) reaches no one. What a member may
/// publish is still its user's permissions in the members account, checked
/// before the import.
pub fn streams_account_exports(prefix: &Prefix) -> Vec<(String, Shared)> {
    let layout = Layout::new(prefix.clone(), 1);
    let one = Shared::Service { many: false };
    let mut shared = vec![
        ("$JS.API.>".to_owned(), Shared::Service { many: true }),
        ("$JS.ACK.>".to_owned(), one),
    ];
    for stream in layout.streams() {
        shared.extend(stream.subjects.into_iter().map(|s| (s, one)));
    }
    for bucket in [
        layout.registry_bucket(),
        layout.beats_bucket(),
        layout.drift_bucket(),
        layout.rule_status_bucket(),
    ] {
        shared.push((format!("$KV.{}.>", bucket.bucket), one));
    }
    shared.push((
        "$JS.EVENT.ADVISORY.STREAM.CREATED.*".to_owned(),
        Shared::Stream,
    ));
    shared
}

/// What a site's leaf node link in the **streams account** must not carry,
/// either way (deploy/nats/TOPOLOGY.md, "Sites with accounts").
///
/// A site's leaf node joins both accounts to the hub's, one link each. A
/// member's publish on a stream or bucket subject crosses the members link
/// (so core followers at the hub see it) and is taken into the streams
/// account on the far side; crossing the streams link as well, it would be
/// stored twice on each side. So the streams link carries the streams'
/// JetStream API under the other domain's prefix (what stream sources use:
/// consumer create, info, and the reset of a durable source consumer) and
/// their flow control, and none of these: the stream and bucket subjects
/// and the creation advisories the members account imports (another
/// domain's advisory only makes agents re-read a stream of theirs that did
/// not change), and the other domain's JetStream calls that create, delete,
/// purge, update, snapshot or restore a stream, delete, pause or unpin a
/// consumer, or move leaders and peers. Sourcing makes none of them but a
/// best-effort delete of its own consumer when it sets a source up again
/// (refused, it is left to expire). A push consumer steered onto one would
/// make it with the streams account's rights; nats-server 2.15 was not seen
/// to deliver onto them (e2e), so this is a second barrier.
pub fn site_streams_link_denied(prefix: &Prefix) -> Vec<String> {
    let mut denied: Vec<String> = streams_account_exports(prefix)
        .into_iter()
        .map(|(subject, _)| subject)
        .filter(|s| !s.starts_with("$JS.API.") && !s.starts_with("$JS.ACK."))
        .collect();
    denied.extend(
        [
            "STREAM.CREATE.*",
            "STREAM.DELETE.*",
            "STREAM.PURGE.*",
            "STREAM.UPDATE.*",
            "STREAM.MSG.DELETE.*",
            "STREAM.SNAPSHOT.*",
            "STREAM.RESTORE.*",
            "STREAM.PEER.REMOVE.*",
            "STREAM.LEADER.STEPDOWN.*",
            "CONSUMER.DELETE.*.*",
            "CONSUMER.PAUSE.*.*",
            "CONSUMER.UNPIN.*.*",
            "CONSUMER.LEADER.STEPDOWN.*.*",
            "META.>",
            "SERVER.>",
        ]
        .map(|call| format!("$JS.*.API.{call}")),
    );
    denied
}

/// The inbox prefix of `cluster`'s agent (`_INBOX_<cluster>`, in place of
/// the client library's `_INBOX`): replies to its requests (its pulls' messages
/// among them) arrive under it, and only its agent may subscribe there.
pub fn agent_inbox_prefix(cluster: &str) -> String {
    format!("_INBOX_{cluster}")
}

/// What `cluster`'s agent subscribes to, and so all it may: its own inbox
/// (every JetStream read is a request answered there: a pull, a get), the commands addressed to it, and the advisories of
/// stream creation (it re-reads a stream the admin recreated). Not another
/// cluster's commands, nor the replies they get, nor anyone's inbox.
fn agent_subscriptions(cluster: &str, prefix: &Prefix) -> Vec<String> {
    vec![
        format!("{}.>", agent_inbox_prefix(cluster)),
        commands_for(prefix, cluster),
        "$JS.EVENT.ADVISORY.STREAM.CREATED.*".to_owned(),
    ]
}

/// The inbox prefix of the `fleetbus notify` bridge: the replies to its pulls and
/// JetStream API requests arrive there, and only it may subscribe there.
pub const NOTIFY_INBOX_PREFIX: &str = "_INBOX_notify";

/// The permissions of the `fleetbus notify` bridge's NATS user. It follows
/// the drift, conflict, rollout and placement streams and the rule status
/// bucket through its durable consumer `consumer` on each (create it, read
/// its info, pull, acknowledge), and reads the registry and beats buckets
/// without a consumer (stream info listing their keys, direct gets of one
/// key): what it says a cluster's health is and checks signatures with. It
/// publishes on no fleet subject, writes no bucket, and cannot delete or
/// list streams or consumers; its only subscription is its own inbox.
pub fn notify_permissions(
    prefix: &Prefix,
    consumer: &str,
) -> Result<Permissions, InvalidClusterName> {
    // The consumer name is a subject token, as a cluster name is in an agent's.
    check_cluster_name(consumer)?;
    let layout = Layout::new(prefix.clone(), 1);
    let mut publish_allow = vec!["$JS.API.INFO".to_owned()];
    for stream in notify_followed(&layout) {
        publish_allow.extend([
            format!("$JS.API.STREAM.INFO.{stream}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.{consumer}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.{consumer}.>"),
            format!("$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{consumer}"),
            format!("$JS.API.CONSUMER.INFO.{stream}.{consumer}"),
            format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
            format!("$JS.ACK.{stream}.{consumer}.>"),
        ]);
    }
    for bucket in [layout.registry_bucket(), layout.beats_bucket()] {
        let stream = format!("KV_{}", bucket.bucket);
        publish_allow.extend([
            format!("$JS.API.STREAM.INFO.{stream}"),
            format!("$JS.API.DIRECT.GET.{stream}.>"),
            format!("$JS.API.STREAM.MSG.GET.{stream}"),
        ]);
    }
    Ok(Permissions {
        publish_allow,
        subscribe_allow: vec![format!("{NOTIFY_INBOX_PREFIX}.>")],
        allow_responses: false,
    })
}

/// The streams `fleetbus notify` follows with its durable consumer: drift,
/// conflicts, rollouts, placements, and the rule status bucket's stream.
pub fn notify_followed(layout: &Layout) -> [String; 5] {
    [
        layout.drift_stream().name,
        layout.conflicts_stream().name,
        layout.rollouts_stream().name,
        layout.placements_stream().name,
        format!("KV_{}", layout.rule_status_bucket().bucket),
    ]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// deploy/nats/accounts.conf, as the tests compare it with the functions.
    fn accounts_conf() -> String {
        std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/nats/accounts.conf"
        ))
        .unwrap()
    }

    /// The quoted strings of `user: <name>`'s publish allow list in accounts.conf.
    fn accounts_conf_publish(conf: &str, user: &str) -> BTreeSet<String> {
        accounts_conf_list(conf, user, "publish")
    }

    /// The quoted strings of `user: <name>`'s `what` (publish, subscribe)
    /// allow list in accounts.conf.
    fn accounts_conf_list(conf: &str, user: &str, what: &str) -> BTreeSet<String> {
        accounts_conf_rule(conf, user, what, "allow")
    }

    /// The quoted strings of `user: <name>`'s `what` (publish, subscribe)
    /// `rule` (allow, deny) list in accounts.conf.
    fn accounts_conf_rule(conf: &str, user: &str, what: &str, rule: &str) -> BTreeSet<String> {
        let start = conf
            .find(&format!("user: {user},"))
            .unwrap_or_else(|| panic!("no user {user} in accounts.conf"));
        let rest = &conf[start..];
        let rest = &rest[rest.find(&format!("{what}: {{")).expect("the list")..];
        let list = &rest[rest.find(&format!("{rule}: [")).expect("the rule")..];
        let list = &list[..list.find(']').expect("end of list")];
        list.lines()
            .map(|l| l.split('#').next().unwrap_or(""))
            .flat_map(|l| l.split('"').skip(1).step_by(2).map(str::to_owned))
            .collect()
    }

    /// The lines of accounts.conf from `from` to the next `]` line.
    fn accounts_conf_block<'a>(conf: &'a str, from: &str) -> Vec<&'a str> {
        let start = conf.find(from).unwrap_or_else(|| panic!("no {from}"));
        conf[start..]
            .lines()
            .skip(1)
            .take_while(|l| l.trim() != "]")
            .map(str::trim)
            .collect()
    }

    #[test]
    fn accounts_conf_shares_the_streams_account_with_the_members_account() {
        let conf = accounts_conf();
        let shared = streams_account_exports(&Prefix::default());
        let exports: Vec<String> = shared
            .iter()
            .map(|(subject, how)| match how {
                Shared::Service { many: true } => {
                    format!("{{ service: \"{subject}\", response: stream }}")
                }
                Shared::Service { many: false } => format!("{{ service: \"{subject}\" }}"),
                Shared::Stream => format!("{{ stream: \"{subject}\" }}"),
            })
            .collect();
        assert_eq!(accounts_conf_block(&conf, "exports: ["), exports);
        let imports: Vec<String> = shared
            .iter()
            .map(|(subject, how)| {
                let kind = if matches!(how, Shared::Stream) {
                    "stream"
                } else {
                    "service"
                };
                format!("{{ {kind}: {{ account: FLEETBUS, subject: \"{subject}\" }} }}")
            })
            .collect();
        assert_eq!(accounts_conf_block(&conf, "imports: ["), imports);
        // The streams account has JetStream and no client user: its one user
        // is a site's leaf node link. Every client is a member.
        let streams =
            &conf[conf.find("  FLEETBUS {").unwrap()..conf.find("  FLEETBUS_MEMBERS {").unwrap()];
        assert!(streams.contains("jetstream: enabled"));
        assert_eq!(streams.matches("user:").count(), 1);
        assert!(streams.contains("user: leaf-streams,"));
        assert!(streams.contains("allowed_connection_types: [\"LEAFNODE\"]"));
    }

    #[test]
    fn a_sites_streams_link_carries_no_stream_subject_and_no_destructive_call() {
        let conf = accounts_conf();
        let denied = site_streams_link_denied(&Prefix::default());
        let want: BTreeSet<String> = denied.iter().cloned().collect();
        for what in ["publish", "subscribe"] {
            assert_eq!(
                accounts_conf_rule(&conf, "leaf-streams", what, "deny"),
                want,
                "{what}"
            );
        }
        let is_denied = |subject: &str| denied.iter().any(|d| subject_matches(d, subject));
        // A member's publishes on streams and buckets cross the members link
        // instead, and another domain's destructive calls do not cross.
        for crossing_elsewhere in [
            "fleetbus.obj.c1.core.v1.ConfigMap.ns.name",
            "fleetbus.drift.c1.core.v1.ConfigMap.ns.name",
            "fleetbus.svc.c1.ns.web",
            "$KV.fleetbus-registry.cluster.c1.id",
            "$KV.fleetbus-beats.beat.c1.id",
            "$JS.EVENT.ADVISORY.STREAM.CREATED.FLEETBUS_OBJECTS",
            "$JS.site-a.API.STREAM.DELETE.FLEETBUS_OBJECTS",
            "$JS.hub.API.STREAM.PURGE.KV_fleetbus-registry",
            "$JS.site-a.API.CONSUMER.PAUSE.FLEETBUS_OBJECTS.c",
            "$JS.site-a.API.SERVER.REMOVE",
        ] {
            assert!(
                is_denied(crossing_elsewhere),
                "{crossing_elsewhere} crosses"
            );
        }
        // Every stream and bucket subject a member may publish, in the form
        // of one concrete subject.
        let member = agent_permissions("c1", &Prefix::default()).unwrap();
        for allowed in member
            .publish_allow
            .iter()
            .filter(|s| !s.starts_with("$JS."))
        {
            let concrete = allowed.replace(">", "x").replace('*', "x");
            assert!(is_denied(&concrete), "{concrete} crosses");
        }
        // What a stream source needs does cross.
        for sourcing in [
            "$JS.site-a.API.CONSUMER.CREATE.KV_fleetbus-registry.JS_SRC_x.$KV.fleetbus-registry.*.c1.*",
            "$JS.site-a.API.CONSUMER.CREATE.FLEETBUS_OBJECTS",
            "$JS.site-a.API.CONSUMER.RESET.FLEETBUS_OBJECTS.durable",
            "$JS.site-a.API.CONSUMER.INFO.FLEETBUS_OBJECTS.c",
            "$JS.site-a.API.STREAM.INFO.FLEETBUS_OBJECTS",
            "$JS.FC.FLEETBUS_OBJECTS.JS_SRC_x.1",
            "$JS.S.abc",
            "$JS.ACK.FLEETBUS_OBJECTS.c.1.2.3.4.5",
        ] {
            assert!(!is_denied(sourcing), "{sourcing} is refused");
        }
    }

    /// Whether the NATS subject pattern `pattern` (`*` one token, `>` the
    /// rest) matches `subject`.
    fn subject_matches(pattern: &str, subject: &str) -> bool {
        let mut subject = subject.split('.');
        for p in pattern.split('.') {
            match (p, subject.next()) {
                (">", Some(_)) => return true,
                (_, None) => return false,
                ("*", Some(_)) => {}
                (p, Some(t)) if p == t => {}
                _ => return false,
            }
        }
        subject.next().is_none()
    }

    #[test]
    fn subjects_match_as_nats_matches_them() {
        assert!(subject_matches("a.*.c", "a.b.c"));
        assert!(subject_matches("a.>", "a.b.c"));
        assert!(!subject_matches("a.>", "a"));
        assert!(!subject_matches("a.*", "a.b.c"));
        assert!(!subject_matches("a.b", "a.c"));
    }

    #[test]
    fn the_streams_account_shares_every_stream_and_bucket_and_no_command() {
        let shared = streams_account_exports(&Prefix::new("acme").unwrap());
        let subjects: Vec<&str> = shared.iter().map(|(s, _)| s.as_str()).collect();
        for want in [
            "$JS.API.>",
            "acme.obj.>",
            "acme.svc.>",
            "$KV.acme-registry.>",
            "$KV.acme-beats.>",
        ] {
            assert!(subjects.contains(&want), "{want}: {subjects:?}");
        }
        // Commands are member-to-member requests, never a stream's.
        assert!(
            !subjects.iter().any(|s| s.contains(".cmd.")),
            "{subjects:?}"
        );
        // Only the API has many replies per request (a pull's messages).
        let many: Vec<&str> = shared
            .iter()
            .filter(|(_, how)| matches!(how, Shared::Service { many: true }))
            .map(|(s, _)| s.as_str())
            .collect();
        assert_eq!(many, ["$JS.API.>"]);
    }

    #[test]
    fn accounts_conf_lists_the_same_set_for_every_cluster() {
        let conf = accounts_conf();
        for c in ["c1", "c2", "c3"] {
            let want: BTreeSet<String> = agent_permissions(c, &Prefix::default())
                .unwrap()
                .publish_allow
                .into_iter()
                .collect();
            assert_eq!(accounts_conf_publish(&conf, c), want, "user {c}");
            let want: BTreeSet<String> = agent_permissions(c, &Prefix::default())
                .unwrap()
                .subscribe_allow
                .into_iter()
                .collect();
            assert_eq!(accounts_conf_list(&conf, c, "subscribe"), want, "user {c}");
        }
    }

    #[test]
    fn replies_go_by_allow_responses_never_by_publishing_on_inboxes() {
        let p = agent_permissions("c1", &Prefix::default()).unwrap();
        assert!(p.allow_responses);
        assert!(
            !p.publish_allow
                .iter()
                .any(|s| s.starts_with("_INBOX") || s == ">" || s.starts_with('*')),
            "{:?}",
            p.publish_allow
        );
        let conf = accounts_conf();
        assert_eq!(
            conf.matches("allow_responses: true").count(),
            3,
            "each cluster user of accounts.conf answers by allow_responses"
        );
    }

    #[test]
    fn reads_are_its_inbox_its_commands_and_advisories() {
        let p = agent_permissions("c1", &Prefix::default()).unwrap();
        assert_eq!(
            p.subscribe_allow,
            [
                "_INBOX_c1.>",
                "fleetbus.cmd.c1.*",
                "$JS.EVENT.ADVISORY.STREAM.CREATED.*"
            ]
        );
        assert!(!p
            .subscribe_allow
            .iter()
            .any(|s| s == ">" || s == "_INBOX.>"));
    }

    #[test]
    fn only_its_own_subtree_and_no_destructive_api() {
        let p = agent_permissions("c1", &Prefix::default()).unwrap();
        for s in &p.publish_allow {
            let own = s.contains(".c1.") || s.starts_with("$JS.");
            assert!(own, "{s} is not c1's own");
            for verb in [
                "DELETE", "PURGE", "UPDATE", "NAMES.*", "LIST.*", "PAUSE", "RESET",
            ] {
                assert!(!s.contains(&format!(".{verb}")), "{s}");
            }
            assert!(!s.starts_with("$JS.API.CONSUMER.>"), "{s}");
            assert!(!s.starts_with("$JS.API.STREAM.CREATE.*"), "{s}");
            // Acks would let it ack another consumer's messages (the notify
            // bridge's); flow control is a push consumer's.
            assert!(!s.starts_with("$JS.ACK") && !s.starts_with("$JS.FC"), "{s}");
        }
        for stream in [
            "FLEETBUS_OBJECTS",
            "FLEETBUS_DRIFT",
            "FLEETBUS_STATUS",
            "FLEETBUS_CONFLICTS",
            "FLEETBUS_ROLLOUTS",
            "FLEETBUS_VERSIONS",
            "FLEETBUS_PLACEMENTS",
            "FLEETBUS_SERVICES",
            "KV_fleetbus-registry",
            "KV_fleetbus-beats",
            "KV_fleetbus-drift",
            "KV_fleetbus-rulestatus",
        ] {
            let create = format!("$JS.API.STREAM.CREATE.{stream}");
            assert!(p.publish_allow.contains(&create), "{create}");
        }
        for own in ["obj", "rollout", "ver", "placement", "svc"] {
            let subtree = format!("fleetbus.{own}.c1.>");
            assert!(p.publish_allow.contains(&subtree), "{subtree}");
        }
    }

    #[test]
    fn a_prefix_renames_subjects_and_buckets() {
        let prefix = Prefix::new("acme.fb").unwrap();
        let p = agent_permissions("c1", &prefix).unwrap();
        assert!(p.publish_allow.contains(&"acme.fb.obj.c1.>".to_owned()));
        assert!(p
            .publish_allow
            .contains(&"$KV.acme_fb-registry.cluster.c1.*".to_owned()));
        assert!(!p.publish_allow.iter().any(|s| s.contains("fleetbus")));
    }

    #[test]
    fn names_that_would_widen_a_subject_are_refused() {
        for bad in [
            "",
            "*",
            ">",
            "c1.>",
            "c1.*",
            "C1",
            "-c1",
            "c1 ",
            "a.b",
            &"a".repeat(64),
        ] {
            let err = agent_permissions(bad, &Prefix::default()).unwrap_err();
            assert_eq!(err, InvalidClusterName(bad.to_owned()));
            assert!(err.to_string().contains("DNS label"), "{err}");
        }
    }

    #[test]
    fn the_notify_bridge_may_only_pull_and_ack_its_own_consumer() {
        let prefix: Prefix = "fleetbus".parse().unwrap();
        let p = notify_permissions(&prefix, "fleetbus-notify").unwrap();
        assert!(!p.allow_responses);
        assert_eq!(p.subscribe_allow, ["_INBOX_notify.>"]);
        let followed = notify_followed(&Layout::new(prefix.clone(), 1));
        for subject in &p.publish_allow {
            assert!(subject.starts_with("$JS."), "{subject}");
            let read_only = ["KV_fleetbus-registry", "KV_fleetbus-beats"]
                .iter()
                .any(|b| subject.contains(b));
            assert!(
                subject == "$JS.API.INFO"
                    || followed.iter().any(|s| subject.contains(s.as_str()))
                    || read_only,
                "{subject}"
            );
            if read_only {
                assert!(
                    subject.starts_with("$JS.API.STREAM.INFO.")
                        || subject.starts_with("$JS.API.DIRECT.GET.")
                        || subject.starts_with("$JS.API.STREAM.MSG.GET."),
                    "{subject}: the buckets it reads are read without a consumer"
                );
            } else {
                assert!(
                    !subject.contains('*') && !subject.ends_with("_DRIFT.>"),
                    "{subject} reaches beyond the one consumer"
                );
            }
            assert!(
                !subject.contains("DELETE") && !subject.contains(".PUT"),
                "{subject}"
            );
        }
        assert!(notify_permissions(&prefix, "a.>").is_err());
    }
}
