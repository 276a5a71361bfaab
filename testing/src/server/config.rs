//! What a test server is told: the settings chosen through the builder, checked, and turned
//! into the server's `zoo.cfg`, its JAAS login file and its JVM options.

use std::path::Path;
use std::time::Duration;

use crate::error::Error;
use crate::kerberos::KerberosService;
use crate::tls::ServerTls;

/// Settings chosen through [`ZooKeeperServerBuilder`](super::ZooKeeperServerBuilder).
#[derive(Clone, Debug)]
pub(super) struct Settings {
    pub(super) tick_time: Duration,
    pub(super) min_session_timeout: Duration,
    pub(super) max_session_timeout: Duration,
    pub(super) container_check_interval: Duration,
    pub(super) startup_timeout: Duration,
    // Boxed: they are rarely set, and a server handle stays small.
    pub(super) tls: Option<Box<ServerTls>>,
    pub(super) sasl: Box<SaslSettings>,
}

/// SASL chosen through [`ZooKeeperServerBuilder`](super::ZooKeeperServerBuilder): DIGEST-MD5
/// users or a Kerberos service (ZooKeeper serves one mechanism: GSSAPI when its login has a
/// Kerberos principal, DIGEST-MD5 otherwise).
#[derive(Clone, Debug, Default)]
pub(super) struct SaslSettings {
    pub(super) digest_users: Vec<(String, String)>,
    pub(super) kerberos: Option<KerberosService>,
    pub(super) required: bool,
}

impl SaslSettings {
    pub(super) fn enabled(&self) -> bool {
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
    pub(super) fn jaas(&self) -> String {
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

/// The timing rules every server this crate starts keeps, alone or in an
/// ensemble: a tick of at least 1 ms, session timeout bounds in order, and a
/// container check interval of at least 1 ms.
pub(crate) fn check_times(
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
    pub(super) fn validate(&self) -> Result<(), Error> {
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
    pub(super) fn serves_plaintext(&self) -> bool {
        self.tls.as_ref().is_none_or(|tls| tls.serves_plaintext())
    }

    /// The `zoo.cfg` of a server listening on `port` (unless TLS only) and, with TLS, on
    /// `secure_port`, keeping its data in `data_dir`.
    pub(super) fn zoo_cfg(&self, port: u16, secure_port: Option<u16>, data_dir: &Path) -> String {
        let mut listeners = String::new();
        if self.serves_plaintext() {
            listeners.push_str(&format!("clientPort={port}\nclientPortAddress=127.0.0.1\n"));
        }
        if let (Some(tls), Some(secure_port)) = (&self.tls, secure_port) {
            listeners.push_str(&format!(
                "secureClientPort={secure_port}\nsecureClientPortAddress=127.0.0.1\n"
            ));
            listeners.push_str(&tls.config_lines());
        }
        if self.sasl.enabled() {
            listeners.push_str(
                "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n",
            );
            if self.sasl.required {
                listeners.push_str("sessionRequireClientSASLAuth=true\n");
            }
        }
        format!(
            "tickTime={tick}\n\
             {listeners}\
             dataDir={data}\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             extendedTypesEnabled=true\n\
             minSessionTimeout={min}\n\
             maxSessionTimeout={max}\n\
             maxClientCnxns=0\n\
             standaloneEnabled=true\n",
            tick = self.tick_time.as_millis(),
            data = data_dir.display(),
            min = self.min_session_timeout.as_millis(),
            max = self.max_session_timeout.as_millis(),
        )
    }

    /// The JVM options of this server: those of every test server ([`jvm_args`]), plus, with
    /// SASL, where its JAAS file (written to `jaas_path`) and its `krb5.conf` are.
    pub(super) fn jvm_args(&self, jaas_path: &Path) -> Vec<String> {
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
pub(crate) fn jvm_args(container_check_interval: Duration) -> Vec<String> {
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
            Settings::default().zoo_cfg(2181, None, data),
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
            settings.zoo_cfg(2181, Some(2182), data),
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
            tls_only.zoo_cfg(2181, Some(2182), data),
            golden::STANDALONE_TLS_ONLY
        );
    }
}
