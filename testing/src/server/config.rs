//! What a test server is told: the settings chosen through the builder, checked, and turned
//! into the server's `zoo.cfg`, its JAAS login file and its JVM options. A member of a
//! [`TestingCluster`](crate::TestingCluster) is told the same, plus what makes it a member
//! ([`Member`]: its id, the quorum's rules and how it reaches its peers).

use std::path::Path;
use std::time::Duration;

use crate::error::Error;
use crate::kerberos::KerberosService;
use crate::tls::ServerTls;

/// Settings chosen through [`ZooKeeperServerBuilder`](super::ZooKeeperServerBuilder), and
/// those of every member chosen through [`TestingClusterBuilder`](crate::TestingClusterBuilder)
/// (which sets neither TLS nor SASL).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) tick_time: Duration,
    pub(crate) min_session_timeout: Duration,
    pub(crate) max_session_timeout: Duration,
    pub(crate) container_check_interval: Duration,
    pub(crate) startup_timeout: Duration,
    // Boxed: they are rarely set, and a server handle stays small.
    pub(crate) tls: Option<Box<ServerTls>>,
    pub(crate) sasl: Box<SaslSettings>,
}

/// The setters of [`Settings`] that both launchers' builders have, written once: each sets
/// the field of the same name on the builder's settings, reached by `$($field).+` from `self`
/// (`settings` for one server, `settings.server` for an ensemble's members); `$servers` is
/// how their docs name the server or servers.
macro_rules! server_setters {
    ($servers:literal, $($field:ident).+) => {
        #[doc = concat!(
            "Sets ZooKeeper's `tickTime`, its basic time unit (session expiry is checked once a ",
            "tick), on ", $servers, "."
        )]
        pub fn tick_time(mut self, tick_time: std::time::Duration) -> Self {
            self.$($field).+.tick_time = tick_time;
            self
        }

        #[doc = concat!(
            "Sets the smallest session timeout granted by ", $servers, " (`minSessionTimeout`)."
        )]
        pub fn min_session_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.$($field).+.min_session_timeout = timeout;
            self
        }

        #[doc = concat!(
            "Sets the largest session timeout granted by ", $servers, " (`maxSessionTimeout`)."
        )]
        pub fn max_session_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.$($field).+.max_session_timeout = timeout;
            self
        }

        #[doc = concat!(
            "Sets how often empty container nodes and expired TTL nodes are looked for on ",
            $servers, " (`znode.container.checkIntervalMs`)."
        )]
        pub fn container_check_interval(mut self, interval: std::time::Duration) -> Self {
            self.$($field).+.container_check_interval = interval;
            self
        }

        /// Sets how long a start or restart may take before it fails.
        pub fn startup_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.$($field).+.startup_timeout = timeout;
            self
        }
    };
}
pub(crate) use server_setters;

/// SASL chosen through [`ZooKeeperServerBuilder`](super::ZooKeeperServerBuilder): DIGEST-MD5
/// users or a Kerberos service (ZooKeeper serves one mechanism: GSSAPI when its login has a
/// Kerberos principal, DIGEST-MD5 otherwise).
#[derive(Clone, Debug, Default)]
pub(crate) struct SaslSettings {
    pub(crate) digest_users: Vec<(String, String)>,
    pub(crate) kerberos: Option<KerberosService>,
    pub(crate) required: bool,
}

impl SaslSettings {
    pub(crate) fn enabled(&self) -> bool {
        !self.digest_users.is_empty() || self.kerberos.is_some()
    }

    fn validate(&self) -> Result<(), Error> {
        if !self.digest_users.is_empty() && self.kerberos.is_some() {
            return Err(Error::InvalidConfig(
                "ZooKeeper serves one SASL mechanism: choose DIGEST-MD5 users or Kerberos"
                    .to_owned(),
            ));
        }
        if self.required && !self.enabled() {
            return Err(Error::InvalidConfig(
                "SASL is required but neither DIGEST-MD5 users nor Kerberos are configured"
                    .to_owned(),
            ));
        }
        for (user, password) in &self.digest_users {
            let plain_user = !user.is_empty()
                && user
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !plain_user {
                return Err(Error::InvalidConfig(format!(
                    "SASL user {user:?}: use letters, digits, `-`, `_` and `.` only"
                )));
            }
            if password
                .chars()
                .any(|c| c == '"' || c == '\\' || c.is_control())
            {
                return Err(Error::InvalidConfig(format!(
                    "the password of SASL user {user:?} contains a quote, a backslash or a control character"
                )));
            }
        }
        Ok(())
    }

    /// The `Server` section ZooKeeper logs in with.
    pub(crate) fn jaas(&self) -> String {
        let mut jaas = String::from("Server {\n");
        if let Some(kerberos) = &self.kerberos {
            jaas.push_str(&format!(
                "  com.sun.security.auth.module.Krb5LoginModule required\n    \
                 useKeyTab=true\n    keyTab=\"{keytab}\"\n    storeKey=true\n    \
                 useTicketCache=false\n    principal=\"{principal}\";\n",
                keytab = kerberos.keytab().display(),
                principal = kerberos.principal(),
            ));
        } else {
            jaas.push_str("  org.apache.zookeeper.server.auth.DigestLoginModule required");
            for (user, password) in &self.digest_users {
                jaas.push_str(&format!("\n    user_{user}=\"{password}\""));
            }
            jaas.push_str(";\n");
        }
        jaas.push_str("};\n");
        jaas
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tick_time: Duration::from_millis(100),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            container_check_interval: Duration::from_millis(100),
            startup_timeout: Duration::from_secs(30),
            tls: None,
            sasl: Box::default(),
        }
    }
}

/// The rules an ensemble's members share, chosen through
/// [`TestingClusterBuilder`](crate::TestingClusterBuilder).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Quorum {
    /// `initLimit`, in ticks.
    pub(crate) init_limit: u32,
    /// `syncLimit`, in ticks.
    pub(crate) sync_limit: u32,
    /// `localSessionsEnabled` and `localSessionsUpgradingEnabled`.
    pub(crate) local_sessions: bool,
}

impl Default for Quorum {
    fn default() -> Self {
        Quorum {
            // 5 s for a (re)joining follower to sync with the leader, and 2 s of silence before
            // a peer counts as gone; generous for a loaded CI machine, and irrelevant to how
            // fast a killed peer is noticed (its sockets close at once).
            init_limit: 50,
            sync_limit: 20,
            local_sessions: false,
        }
    }
}

impl Quorum {
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.init_limit == 0 || self.sync_limit == 0 {
            return Err(Error::InvalidConfig(
                "initLimit and syncLimit must be at least one tick".to_owned(),
            ));
        }
        Ok(())
    }
}

/// The ports of one member of an ensemble, as a member reaches it: its client port, and the
/// quorum and election ports of its `server.N` line (a member's own are the ones it binds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PeerPorts {
    pub(crate) client: u16,
    pub(crate) peer: u16,
    pub(crate) election: u16,
}

/// What makes a server a member of an ensemble.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    /// Its `myid`, from 1.
    pub(crate) myid: usize,
    pub(crate) quorum: Quorum,
    /// How it reaches every member, in `myid` order (its own entry being its real ports).
    pub(crate) servers: Vec<PeerPorts>,
}

/// The timing rules every server this crate starts keeps, alone or in an
/// ensemble: a tick of at least 1 ms, session timeout bounds in order, and a
/// container check interval of at least 1 ms.
fn check_times(
    tick_time: Duration,
    min_session_timeout: Duration,
    max_session_timeout: Duration,
    container_check_interval: Duration,
) -> Result<(), Error> {
    if tick_time.as_millis() == 0 {
        return Err(Error::InvalidConfig(
            "tick time must be at least 1ms".to_owned(),
        ));
    }
    if min_session_timeout > max_session_timeout {
        return Err(Error::InvalidConfig(format!(
            "min session timeout {min_session_timeout:?} exceeds max session timeout {max_session_timeout:?}"
        )));
    }
    if container_check_interval.as_millis() == 0 {
        return Err(Error::InvalidConfig(
            "container check interval must be at least 1ms".to_owned(),
        ));
    }
    Ok(())
}

impl Settings {
    pub(crate) fn validate(&self) -> Result<(), Error> {
        check_times(
            self.tick_time,
            self.min_session_timeout,
            self.max_session_timeout,
            self.container_check_interval,
        )?;
        if let Some(tls) = &self.tls {
            for (what, path) in [
                ("key store", tls.key_store()),
                ("trust store", tls.trust_store()),
            ] {
                if !path.is_file() {
                    return Err(Error::InvalidConfig(format!(
                        "TLS {what} {} is not a file",
                        path.display()
                    )));
                }
            }
        }
        self.sasl.validate()
    }

    /// Whether the plaintext client port is served (always, unless TLS only).
    pub(crate) fn serves_plaintext(&self) -> bool {
        self.tls.as_ref().is_none_or(|tls| tls.serves_plaintext())
    }

    /// The `zoo.cfg` of a server listening on `port` (unless TLS only) and, with TLS, on
    /// `secure_port`, keeping its data in `data_dir`; with `member`, of that ensemble member.
    pub(crate) fn zoo_cfg(
        &self,
        port: u16,
        secure_port: Option<u16>,
        data_dir: &Path,
        member: Option<&Member>,
    ) -> String {
        let mut config = format!("tickTime={}\n", self.tick_time.as_millis());
        if let Some(member) = member {
            config.push_str(&format!(
                "initLimit={}\nsyncLimit={}\n",
                member.quorum.init_limit, member.quorum.sync_limit
            ));
        }
        if self.serves_plaintext() {
            config.push_str(&format!("clientPort={port}\nclientPortAddress=127.0.0.1\n"));
        }
        if let (Some(tls), Some(secure_port)) = (&self.tls, secure_port) {
            config.push_str(&format!(
                "secureClientPort={secure_port}\nsecureClientPortAddress=127.0.0.1\n"
            ));
            config.push_str(&tls.config_lines());
        }
        if self.sasl.enabled() {
            config.push_str(
                "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n",
            );
            if self.sasl.required {
                config.push_str("sessionRequireClientSASLAuth=true\n");
            }
        }
        config.push_str(&format!(
            "dataDir={data}\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             extendedTypesEnabled=true\n\
             minSessionTimeout={min}\n\
             maxSessionTimeout={max}\n\
             maxClientCnxns=0\n\
             standaloneEnabled={standalone}\n",
            data = data_dir.display(),
            min = self.min_session_timeout.as_millis(),
            max = self.max_session_timeout.as_millis(),
            standalone = member.is_none(),
        ));
        if let Some(member) = member {
            config.push_str("reconfigEnabled=false\nquorumListenOnAllIPs=false\n");
            if member.quorum.local_sessions {
                config.push_str("localSessionsEnabled=true\nlocalSessionsUpgradingEnabled=true\n");
            }
            for (index, ports) in member.servers.iter().enumerate() {
                config.push_str(&format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    index + 1,
                    ports.peer,
                    ports.election
                ));
            }
        }
        config
    }

    /// The JVM options of this server: those of every test server ([`jvm_args`]), plus, with
    /// SASL, where its JAAS file (written to `jaas_path`) and its `krb5.conf` are.
    pub(crate) fn jvm_args(&self, jaas_path: &Path) -> Vec<String> {
        let mut args = jvm_args(self.container_check_interval);
        if self.sasl.enabled() {
            args.push(format!(
                "-Djava.security.auth.login.config={}",
                jaas_path.display()
            ));
        }
        if let Some(kerberos) = &self.sasl.kerberos {
            args.push(format!(
                "-Djava.security.krb5.conf={}",
                kerberos.krb5_conf().display()
            ));
        }
        args
    }
}

/// The JVM options of every test server (also the cluster's): a small heap and cheap
/// compilation, no fsync, and containers reaped every `container_check_interval`.
fn jvm_args(container_check_interval: Duration) -> Vec<String> {
    vec![
        // Small heap, cheap collector and the C1 compiler only: a test server is small and
        // short lived, and this keeps memory low when many run side by side.
        "-Xms16m".to_owned(),
        "-Xmx128m".to_owned(),
        "-XX:+UseSerialGC".to_owned(),
        "-XX:TieredStopAtLevel=1".to_owned(),
        // No hsperfdata files left behind in /tmp by a killed JVM.
        "-XX:-UsePerfData".to_owned(),
        "-Djava.awt.headless=true".to_owned(),
        format!(
            "-Dznode.container.checkIntervalMs={}",
            container_check_interval.as_millis()
        ),
        "-Dznode.container.maxPerMinute=100000".to_owned(),
        // Durability against machine crashes is useless here; skipping fsync makes writes
        // fast, and a killed process loses nothing that was written.
        "-Dzookeeper.forceSync=no".to_owned(),
        // Transaction logs are preallocated in steps of this many KiB (default 64 MiB).
        "-Dzookeeper.preAllocSize=1024".to_owned(),
        "-Dzookeeper.jmx.log4j.disable=true".to_owned(),
        "-Dorg.slf4j.simpleLogger.showDateTime=true".to_owned(),
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS".to_owned(),
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=info".to_owned(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::zoo_cfg_golden as golden;
    use crate::tls::ClientAuth;

    #[test]
    fn standalone_zoo_cfg_is_unchanged() {
        let data = Path::new("/zk/data");
        assert_eq!(
            Settings::default().zoo_cfg(2181, None, data, None),
            golden::STANDALONE
        );
        let mut settings = Settings {
            tick_time: Duration::from_millis(250),
            min_session_timeout: Duration::from_secs(1),
            max_session_timeout: Duration::from_secs(30),
            tls: Some(Box::new(
                ServerTls::new("/certs/key.pem", "/certs/trust.pem")
                    .plaintext_port(true)
                    .client_auth(ClientAuth::Want),
            )),
            ..Settings::default()
        };
        settings
            .sasl
            .digest_users
            .push(("alice".to_owned(), "secret".to_owned()));
        settings.sasl.required = true;
        assert_eq!(
            settings.zoo_cfg(2181, Some(2182), data, None),
            golden::STANDALONE_TLS_SASL
        );
        let tls_only = Settings {
            tls: Some(Box::new(ServerTls::new(
                "/certs/key.pem",
                "/certs/trust.pem",
            ))),
            ..Settings::default()
        };
        assert_eq!(
            tls_only.zoo_cfg(2181, Some(2182), data, None),
            golden::STANDALONE_TLS_ONLY
        );
    }

    #[test]
    fn member_zoo_cfg_is_unchanged() {
        let ports = |all: [(u16, u16, u16); 3]| {
            all.map(|(client, peer, election)| PeerPorts {
                client,
                peer,
                election,
            })
            .to_vec()
        };
        let real = ports(golden::MEMBER_PORTS);
        let data = Path::new("/zk/node-1/data");
        let member = Member {
            myid: 2,
            quorum: Quorum::default(),
            servers: real.clone(),
        };
        assert_eq!(
            Settings::default().zoo_cfg(real[1].client, None, data, Some(&member)),
            golden::MEMBER
        );
        let settings = Settings {
            tick_time: Duration::from_millis(50),
            ..Settings::default()
        };
        let member = Member {
            myid: 2,
            quorum: Quorum {
                init_limit: 10,
                sync_limit: 5,
                local_sessions: true,
            },
            servers: ports(golden::MEMBER_PROXIED_VIEW),
        };
        assert_eq!(
            settings.zoo_cfg(real[1].client, None, data, Some(&member)),
            golden::MEMBER_PROXIED
        );
    }
}
