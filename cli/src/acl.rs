//! The ACL of the nodes `lock` and `elect` create (`--acl`), and the
//! message for a refusal by a node's ACL.
//!
//! Without `--acl`, a session with credentials (`ZK_AUTH`, `ZK_SASL`, a
//! client certificate) gives its nodes all permissions for itself and read
//! for everyone ([`CreatorAllAnyoneRead`], what Kafka's
//! `zookeeper.set.acl=true` does); a session without any keeps them open
//! to everyone, as before `--acl` existed.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use clap::Args;
use zk_curator::{zk, CreatorAllAnyoneRead, Error, Framework, FrameworkBuilder};

use crate::exit::{Failure, OTHER};

/// What `--acl` accepts, for the messages that refuse a value.
const FORMS: &str = "--acl takes SCHEME:ID:PERMS in ZooKeeper's form (world:anyone:r, \
     auth::cdrwa, digest:USER:HASH:cdrwa, sasl:USER:cdrwa, x509:SUBJECT-DN:cdrwa, \
     ip:ADDRESS[/BITS]:r; PERMS are letters of cdrwa, each at most once) or a short \
     name: open (world:anyone:cdrwa), creator (auth::cdrwa), world-read (world:anyone:r)";

/// How long a refusal's message may wait for the server to say who this
/// session is (a client certificate's subject, a Kerberos principal).
const WHO_AM_I_LIMIT: Duration = Duration::from_millis(500);

/// The `--acl` option of `lock` and `elect`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Access control")]
pub(crate) struct AclArgs {
    /// The ACL of every node this command creates (its lock or election
    /// node, the lock or election path, parents made on the way); repeat it
    /// for several entries. SPEC is ZooKeeper's SCHEME:ID:PERMS, PERMS
    /// letters of cdrwa (create, delete, read, write, admin):
    /// world:anyone:r, auth::cdrwa (the identities this session proved),
    /// digest:USER:HASH:cdrwa (HASH is base64(sha1("USER:PASSWORD"))),
    /// sasl:USER:cdrwa, x509:SUBJECT-DN:cdrwa, ip:ADDRESS[/BITS]:r. Or a
    /// short name: `open` (world:anyone:cdrwa), `creator` (auth::cdrwa),
    /// `world-read` (world:anyone:r). Without --acl: `creator` and
    /// `world-read` when credentials are given (ZK_AUTH, ZK_SASL, or a
    /// client certificate under ZooKeeper's x509 provider), so holders stay
    /// visible to everyone while no one else can queue or delete; `open`
    /// without credentials.
    // Checked by `settle`, not by clap: clap's message would repeat the
    // value, and a digest spec given a password by mistake must not show.
    #[arg(long = "acl", value_name = "SPEC")]
    pub(crate) acl: Vec<String>,
    /// Who this session is and what it asked for, for the message of a
    /// refusal; set by [`AclArgs::settle`] once the credentials are known.
    #[arg(skip)]
    pub(crate) refusal: Refusal,
}

impl AclArgs {
    /// The ACL for the nodes of a session with (`credentials`) or without
    /// credentials: `--acl` as given (exact duplicates dropped), or the
    /// default.
    ///
    /// # Errors
    /// A usage failure for a malformed `--acl`, naming the accepted forms.
    pub(crate) fn node_acl(&self, credentials: bool) -> Result<NodeAcl, Failure> {
        if self.acl.is_empty() {
            return Ok(if credentials {
                NodeAcl::CreatorAllAnyoneRead
            } else {
                NodeAcl::Open
            });
        }
        let mut given: Vec<zk::Acl> = Vec::with_capacity(self.acl.len());
        for spec in &self.acl {
            let acl = parse_spec(spec).map_err(|why| Failure::usage(format!("--acl {why}")))?;
            if !given.contains(&acl) {
                given.push(acl);
            }
        }
        Ok(NodeAcl::Given(given))
    }

    /// Chooses the ACL with what `identity` says of the session's
    /// credentials, and keeps both for the message of a refusal. Nothing
    /// is sent.
    ///
    /// # Errors
    /// As [`AclArgs::node_acl`].
    pub(crate) fn settle(&mut self, identity: Identity) -> Result<NodeAcl, Failure> {
        let node_acl = self.node_acl(identity.has_credentials())?;
        self.refusal = Refusal {
            identity,
            acl: node_acl.acl(),
        };
        Ok(node_acl)
    }
}

/// The ACL given to created nodes, applied through the framework's builder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NodeAcl {
    /// No `--acl`, credentials: the library's [`CreatorAllAnyoneRead`].
    CreatorAllAnyoneRead,
    /// No `--acl`, no credentials: world:anyone:cdrwa (the framework's
    /// default).
    Open,
    /// `--acl`, as given.
    Given(Vec<zk::Acl>),
}

impl NodeAcl {
    /// The entries this ACL gives a node (`auth` not yet expanded).
    pub(crate) fn acl(&self) -> Vec<zk::Acl> {
        match self {
            NodeAcl::CreatorAllAnyoneRead => CreatorAllAnyoneRead::acl(),
            NodeAcl::Open => zk::Acls::anyone_all().to_vec(),
            NodeAcl::Given(acl) => acl.clone(),
        }
    }

    /// `builder` with this ACL as the one of every node it creates.
    pub(crate) fn apply(&self, builder: FrameworkBuilder) -> FrameworkBuilder {
        match self {
            NodeAcl::CreatorAllAnyoneRead => builder.acl_provider(CreatorAllAnyoneRead),
            NodeAcl::Open | NodeAcl::Given(_) => builder.default_acl(self.acl()),
        }
    }
}

/// The credentials a session presents, as messages name them (never a
/// password or a key).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    /// `ZK_AUTH`'s user.
    pub(crate) digest_user: Option<String>,
    /// `ZK_SASL=digest:`'s user.
    pub(crate) sasl_user: Option<String>,
    /// `ZK_SASL=kerberos`.
    pub(crate) kerberos: bool,
    /// The client certificate's file.
    pub(crate) certificate: Option<String>,
}

impl Identity {
    /// Whether the session proves any identity ZooKeeper may know it by.
    pub(crate) fn has_credentials(&self) -> bool {
        self.digest_user.is_some()
            || self.sasl_user.is_some()
            || self.kerberos
            || self.certificate.is_some()
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut named = Vec::new();
        if let Some(user) = &self.digest_user {
            named.push(format!("digest:{user}"));
        }
        if let Some(user) = &self.sasl_user {
            named.push(format!("sasl:{user}"));
        }
        if self.kerberos {
            named.push("sasl (the Kerberos principal of the credential cache)".to_owned());
        }
        if let Some(file) = &self.certificate {
            named.push(format!("x509 certificate {file}"));
        }
        if named.is_empty() {
            f.write_str("anonymous (no credentials)")
        } else {
            f.write_str(&named.join(" and "))
        }
    }
}

/// What a refusal by an ACL is told with: who the session is, and the ACL
/// it gave its nodes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Refusal {
    identity: Identity,
    acl: Vec<zk::Acl>,
}

impl Refusal {
    /// The failure for `err`, met while doing `what` on `path`: for a
    /// refusal by an ACL ([`Error::NoAuth`], [`Error::InvalidAcl`]), exit
    /// [`OTHER`] naming the path and the identity used; any other error as
    /// [`Failure::zk`] tells it.
    pub(crate) async fn failure(
        &self,
        framework: &Framework,
        what: &str,
        path: &str,
        err: Error,
    ) -> Failure {
        if !matches!(err, Error::NoAuth | Error::InvalidAcl) {
            return Failure::zk(what, err);
        }
        let seen = self.seen_by_server(framework).await;
        let who = match &seen {
            Some(seen) => format!("{} (known to the server as {seen})", self.identity),
            None => self.identity.to_string(),
        };
        let message = if err == Error::NoAuth {
            format!(
                "{what}: refused by ZooKeeper (NoAuth): the ACL of {path} (or of a node above \
                 it) does not let {who} do this; the path belongs to another identity: run as \
                 one its ACL admits, or have it made with an --acl that admits this one"
            )
        } else {
            let mut message = format!(
                "{what}: ZooKeeper refused the ACL asked for the nodes under {path} ({}) as \
                 invalid, for {who}",
                AclList(&self.acl)
            );
            if self.acl.iter().any(|acl| acl.scheme() == "auth") && seen.is_none() {
                message.push_str(
                    ": `auth` (the creator, --acl creator) stands for the identities the \
                     session proved, and the server knows none of this one; set ZK_AUTH or \
                     ZK_SASL, use a client certificate with ZooKeeper's x509 provider \
                     (authProvider.x509), or name the identities with --acl",
                );
            }
            message
        };
        Failure::new(OTHER, message)
    }

    /// The identities the server knows this session by, where the local
    /// account leaves them out: a certificate's subject (`x509:`) or a
    /// Kerberos principal (`sasl:`). `None` when there are none, or when
    /// the server does not answer soon (or lacks `whoAmI`).
    async fn seen_by_server(&self, framework: &Framework) -> Option<String> {
        let mut schemes = Vec::new();
        if self.identity.certificate.is_some() {
            schemes.push("x509");
        }
        if self.identity.kerberos {
            schemes.push("sasl");
        }
        if schemes.is_empty() {
            return None;
        }
        let asked = async {
            let client = framework.client().await.ok()?;
            client.list_auth_users().await.ok()
        };
        let users = tokio::time::timeout(WHO_AM_I_LIMIT, asked)
            .await
            .ok()
            .flatten()?;
        let seen: Vec<String> = users
            .iter()
            .filter(|user| schemes.contains(&user.scheme()))
            .map(|user| format!("{}:{}", user.scheme(), user.user()))
            .collect();
        (!seen.is_empty()).then(|| seen.join(", "))
    }
}

/// ACL entries as ZooKeeper's `getAcl` prints them, `scheme:id:perms`.
struct AclList<'a>(&'a [zk::Acl]);

impl fmt::Display for AclList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, acl) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(
                f,
                "{}:{}:{}",
                acl.scheme(),
                acl.id(),
                perms_text(acl.permission())
            )?;
        }
        Ok(())
    }
}

/// The permission letters, in ZooKeeper's order (`cdrwa`).
fn perms_text(permission: zk::Permission) -> String {
    PERMS
        .iter()
        .filter(|(_, perm)| permission.has(*perm))
        .map(|(letter, _)| *letter)
        .collect()
}

const PERMS: [(char, zk::Permission); 5] = [
    ('c', zk::Permission::CREATE),
    ('d', zk::Permission::DELETE),
    ('r', zk::Permission::READ),
    ('w', zk::Permission::WRITE),
    ('a', zk::Permission::ADMIN),
];

/// `spec` as messages may show it: a digest spec's id may be a password
/// given by mistake, so only its user shows.
fn shown(spec: &str) -> String {
    match spec.strip_prefix("digest:") {
        Some(rest) => {
            let user = rest.split(':').next().unwrap_or_default();
            format!("\"digest:{user}:...\"")
        }
        None => format!("{spec:?}"),
    }
}

/// Parses one `--acl` value (see [`FORMS`]).
fn parse_spec(spec: &str) -> Result<zk::Acl, String> {
    let refused = |why: String| format!("{why}; {FORMS}");
    let spec_shown = shown(spec);
    match spec {
        "open" => return Ok(zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())),
        "creator" => return Ok(zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed())),
        "world-read" => return Ok(zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())),
        _ => {}
    }
    let (Some((scheme, rest)), Some((_, perms))) = (spec.split_once(':'), spec.rsplit_once(':'))
    else {
        return Err(refused(format!(
            "{spec_shown} is neither SCHEME:ID:PERMS nor a short name"
        )));
    };
    let Some((id, _)) = rest.rsplit_once(':') else {
        return Err(refused(format!(
            "{spec_shown} has no ID part (SCHEME:ID:PERMS; `auth` and its empty id are auth::PERMS)"
        )));
    };
    let permission = parse_perms(perms).map_err(|why| refused(format!("{spec_shown}: {why}")))?;
    check_id(scheme, id).map_err(|why| refused(format!("{spec_shown}: {why}")))?;
    Ok(zk::Acl::new(permission, zk::AuthId::new(scheme, id)))
}

/// `cdrwa` letters, each at most once, at least one.
fn parse_perms(perms: &str) -> Result<zk::Permission, String> {
    if perms.is_empty() {
        return Err("no permissions (PERMS is one or more of c d r w a)".into());
    }
    let mut permission = zk::Permission::NONE;
    for letter in perms.chars() {
        let Some((_, perm)) = PERMS.iter().find(|(l, _)| *l == letter) else {
            return Err(format!(
                "{letter:?} is not a permission (c create, d delete, r read, w write, a admin)"
            ));
        };
        if permission.has(*perm) {
            return Err(format!("permission {letter:?} is given twice"));
        }
        permission = permission | *perm;
    }
    Ok(permission)
}

/// Checks the id of `scheme` as ZooKeeper's providers would take it.
fn check_id(scheme: &str, id: &str) -> Result<(), String> {
    match scheme {
        "world" if id == "anyone" => Ok(()),
        "world" => Err("the only id of `world` is `anyone`".into()),
        "auth" if id.is_empty() => Ok(()),
        "auth" => {
            Err("`auth` takes no id (auth::PERMS): it stands for this session's identities".into())
        }
        "digest" => match id.split_once(':') {
            Some((user, hash)) if !user.is_empty() && is_sha1_base64(hash) => Ok(()),
            _ => Err(
                "a digest id is USER:HASH, HASH being base64(sha1(\"USER:PASSWORD\")) \
                 (28 characters ending in `=`), never the password"
                    .into(),
            ),
        },
        "sasl" | "x509" if id.is_empty() => Err(format!(
            "`{scheme}` needs an id (a user, a certificate's subject)"
        )),
        "sasl" | "x509" => Ok(()),
        "ip" => {
            let (address, bits) = match id.split_once('/') {
                Some((address, bits)) => (address, Some(bits)),
                None => (id, None),
            };
            let Ok(address) = address.parse::<IpAddr>() else {
                return Err(format!("{address:?} is not an IP address"));
            };
            let most = if address.is_ipv4() { 32 } else { 128 };
            match bits.map(str::parse::<u8>) {
                None => Ok(()),
                Some(Ok(bits)) if bits <= most => Ok(()),
                Some(_) => Err(format!("the prefix length is 0 to {most}")),
            }
        }
        "" => Err("no scheme".into()),
        _ => Err(format!(
            "{scheme:?} is not a scheme zk-curator knows (world, auth, digest, sasl, x509, ip)"
        )),
    }
}

/// Whether `hash` has the form of base64 of a SHA-1 digest (20 bytes: 27
/// base64 characters and one `=`).
fn is_sha1_base64(hash: &str) -> bool {
    let base64 = |c: char| c.is_ascii_alphanumeric() || c == '+' || c == '/';
    hash.len() == 28 && hash.ends_with('=') && hash[..27].chars().all(base64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn text(spec: &str) -> String {
        AclList(&[parse_spec(spec).unwrap()]).to_string()
    }

    #[test]
    fn zookeepers_forms_are_taken() {
        for (spec, shown) in [
            ("world:anyone:r", "world:anyone:r"),
            ("world:anyone:cdrwa", "world:anyone:cdrwa"),
            ("world:anyone:awrdc", "world:anyone:cdrwa"),
            ("auth::cdrwa", "auth::cdrwa"),
            (
                "digest:alice:SQICbGEP3vUd4FffsXSLZ8/1XtI=:rw",
                "digest:alice:SQICbGEP3vUd4FffsXSLZ8/1XtI=:rw",
            ),
            ("sasl:alice:cdrwa", "sasl:alice:cdrwa"),
            (
                "x509:CN=alice,O=zk-curator tests:cdrwa",
                "x509:CN=alice,O=zk-curator tests:cdrwa",
            ),
            ("ip:10.0.0.0/8:r", "ip:10.0.0.0/8:r"),
            ("ip:::1:r", "ip:::1:r"),
            ("open", "world:anyone:cdrwa"),
            ("creator", "auth::cdrwa"),
            ("world-read", "world:anyone:r"),
        ] {
            assert_eq!(text(spec), shown, "{spec}");
        }
        let acl = parse_spec("x509:CN=a,O=b:r").unwrap();
        assert_eq!((acl.scheme(), acl.id()), ("x509", "CN=a,O=b"));
        assert_eq!(acl.permission(), zk::Permission::READ);
    }

    #[test]
    fn malformed_specs_name_the_accepted_forms() {
        for bad in [
            "",
            "everyone",
            "world:anyone",
            "world:anyone:",
            "world:anyone:rx",
            "world:anyone:rr",
            "world:anyone:R",
            "world:someone:r",
            "wrold:anyone:r",
            ":anyone:r",
            "auth:alice:cdrwa",
            "digest:alice:cdrwa",
            "digest:alice:password:cdrwa",
            "digest::SQICbGEP3vUd4FffsXSLZ8/1XtI=:r",
            "sasl::r",
            "x509::r",
            "ip:not-an-address:r",
            "ip:10.0.0.0/33:r",
            "ip:::1/129:r",
        ] {
            let err = parse_spec(bad).unwrap_err();
            assert!(
                err.contains("SCHEME:ID:PERMS") && err.contains("world-read"),
                "{bad:?}: {err}"
            );
        }
        let err = parse_spec("digest:alice:hunter2:cdrwa").unwrap_err();
        assert!(err.contains("never the password"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("digest:alice:..."), "{err}");
    }

    #[test]
    fn the_default_depends_on_credentials() {
        let args = AclArgs {
            acl: Vec::new(),
            refusal: Refusal::default(),
        };
        assert_eq!(args.node_acl(true).unwrap(), NodeAcl::CreatorAllAnyoneRead);
        assert_eq!(args.node_acl(false).unwrap(), NodeAcl::Open);
        assert_eq!(
            AclList(&NodeAcl::CreatorAllAnyoneRead.acl()).to_string(),
            "auth::cdrwa, world:anyone:r"
        );
        assert_eq!(
            AclList(&NodeAcl::Open.acl()).to_string(),
            "world:anyone:cdrwa"
        );
    }

    #[test]
    fn given_acls_win_and_exact_duplicates_go() {
        let args = AclArgs {
            acl: ["world-read", "world:anyone:r", "creator"]
                .into_iter()
                .map(String::from)
                .collect(),
            refusal: Refusal::default(),
        };
        for credentials in [true, false] {
            let acl = args.node_acl(credentials).unwrap();
            assert_eq!(
                AclList(&acl.acl()).to_string(),
                "world:anyone:r, auth::cdrwa"
            );
        }
    }

    #[test]
    fn a_malformed_acl_is_a_usage_error_that_hides_passwords() {
        let mut args = AclArgs {
            acl: vec!["world:anyone:r".into(), "digest:alice:hunter2:cdrwa".into()],
            refusal: Refusal::default(),
        };
        let failure = args.settle(Identity::default()).unwrap_err();
        assert_eq!(failure.code, crate::exit::USAGE);
        assert!(failure.message.starts_with("--acl "), "{}", failure.message);
        assert!(!failure.message.contains("hunter2"), "{}", failure.message);
    }

    #[test]
    fn identities_are_named_without_secrets() {
        assert_eq!(
            Identity::default().to_string(),
            "anonymous (no credentials)"
        );
        assert!(!Identity::default().has_credentials());
        let identity = Identity {
            digest_user: Some("bob".into()),
            sasl_user: Some("bob".into()),
            kerberos: false,
            certificate: Some("/etc/bob.crt".into()),
        };
        assert!(identity.has_credentials());
        assert_eq!(
            identity.to_string(),
            "digest:bob and sasl:bob and x509 certificate /etc/bob.crt"
        );
    }
}
