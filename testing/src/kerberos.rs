//! A private MIT Kerberos KDC on loopback, for SASL GSSAPI tests against a real ZooKeeper.
//!
//! [`Kdc::start`] builds a realm ([`REALM`], `ZKTEST.LOCAL`) in a temporary directory and
//! serves it with `krb5kdc` on a free `127.0.0.1` port. Nothing global is read or written:
//! the tools run with the KDC's own `krb5.conf` (`KRB5_CONFIG`) and `kdc.conf`
//! (`KRB5_KDC_PROFILE`), its database and stash file live in the directory, and credential
//! caches are files there too (`KRB5CCNAME`). No root is needed.
//!
//! The realm holds two principals:
//!
//! * the ZooKeeper service, `zookeeper/localhost@ZKTEST.LOCAL`, with a random key exported
//!   to a keytab: [`Kdc::zookeeper_service`] gives it to
//!   [`ZooKeeperServerBuilder::kerberos`](crate::ZooKeeperServerBuilder::kerberos);
//! * a client, `zkclient@ZKTEST.LOCAL`, with a password ([`Kdc::client_password`]) and a
//!   keytab holding the same key ([`Kdc::client_keytab`]).
//!
//! More are added with [`Kdc::add_principal`] and [`Kdc::export_keytab`]. [`Kdc::kinit`]
//! obtains a ticket into a private credential cache and [`Kdc::env`] lists the environment a
//! GSSAPI client of the realm needs.
//!
//! # Process lifetime
//!
//! `krb5kdc -n` (it stays in the foreground) runs under the same `sh` wrapper as a
//! [`ZooKeeperServer`](crate::ZooKeeperServer) (see [`server`](crate::server)): it is killed
//! through its own pid when the [`Kdc`] is dropped or stopped, or when the test process
//! exits, even if the `Kdc` is never dropped.
//!
//! The Debian packages `krb5-kdc`, `krb5-admin-server` and `krb5-user` provide the tools;
//! tests check for them with [`Prerequisite::Kdc`](crate::backend::Prerequisite::Kdc).

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tracing::{debug, info};

use crate::error::Error;
use crate::process::{
    exit_error, free_port, spawn_owned, tail_lines, ServerProcess, ERROR_LOG_LINES, POLL_INTERVAL,
    START_PORT_ATTEMPTS,
};

/// The realm every [`Kdc`] serves.
pub const REALM: &str = "ZKTEST.LOCAL";

/// The ZooKeeper service principal of the realm (its host part is what clients connect to).
pub const ZOOKEEPER_PRINCIPAL: &str = "zookeeper/localhost@ZKTEST.LOCAL";

/// The client principal of the realm.
pub const CLIENT_PRINCIPAL: &str = "zkclient@ZKTEST.LOCAL";

/// The Debian packages providing the KDC and the tools.
pub const KDC_PACKAGES: &str = "krb5-kdc krb5-admin-server krb5-user";

/// The programs a [`Kdc`] runs.
const TOOLS: [&str; 5] = ["krb5kdc", "kdb5_util", "kadmin.local", "kinit", "klist"];

/// Where Debian installs the tools when they are not on `PATH` (`/usr/sbin` often is not).
const TOOL_DIRS: [&str; 4] = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// Prefix of the KDC directories.
const DIR_PREFIX: &str = "zk-testing-kdc-";

/// How long the KDC may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Passwords of the throwaway realm.
const MASTER_PASSWORD: &str = "zk-testing-master";
const CLIENT_PASSWORD: &str = "zk-testing-client-password";

/// Returns whether the KDC and the Kerberos tools are installed here.
pub fn kdc_available() -> bool {
    TOOLS.iter().all(|tool| find_tool(tool).is_some())
}

fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(TOOL_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

/// What a ZooKeeper server needs to accept Kerberos logins: its principal, the keytab with
/// its key, and the `krb5.conf` naming the KDC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KerberosService {
    principal: String,
    keytab: PathBuf,
    krb5_conf: PathBuf,
}

impl KerberosService {
    /// A service from its parts, for a realm not made by [`Kdc`].
    pub fn new(
        principal: impl Into<String>,
        keytab: impl Into<PathBuf>,
        krb5_conf: impl Into<PathBuf>,
    ) -> Self {
        KerberosService {
            principal: principal.into(),
            keytab: keytab.into(),
            krb5_conf: krb5_conf.into(),
        }
    }

    /// The service principal, e.g. `zookeeper/localhost@ZKTEST.LOCAL`.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The keytab holding the principal's key.
    pub fn keytab(&self) -> &Path {
        &self.keytab
    }

    /// The Kerberos configuration the server's JVM reads (`-Djava.security.krb5.conf`).
    pub fn krb5_conf(&self) -> &Path {
        &self.krb5_conf
    }
}

/// A running MIT Kerberos KDC owned by a test; see the [module docs](self).
pub struct Kdc {
    port: u16,
    service: KerberosService,
    client_keytab: PathBuf,
    process: Mutex<Option<ServerProcess>>,
    // Declared last so the directory is removed after the KDC is gone.
    dir: TempDir,
}

impl fmt::Debug for Kdc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kdc")
            .field("realm", &REALM)
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Kdc {
    /// Creates the realm with its two principals and keytabs, starts the KDC and blocks until
    /// it accepts connections (about a second).
    ///
    /// # Errors
    /// A Kerberos tool missing ([`Error::ToolNotFound`]) or failing ([`Error::Command`]), a
    /// file that could not be written, or a KDC that did not come up.
    pub fn start() -> Result<Kdc, Error> {
        let started = Instant::now();
        let tools = Tools::locate()?;
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .map_err(|err| Error::io("cannot create the KDC directory", err))?;
        let root = dir.path();
        write(&root.join("kadm5.acl"), "")?;
        // The database does not depend on the port; the configuration files are rewritten
        // for each port tried below.
        let mut port = free_port()?;
        write_config(root, port)?;
        run(
            tools.command("kdb5_util", root)?.args([
                "-r",
                REALM,
                "create",
                "-s",
                "-P",
                MASTER_PASSWORD,
            ]),
            "kdb5_util create",
        )?;
        let service_keytab = root.join("zookeeper.keytab");
        let client_keytab = root.join("zkclient.keytab");
        kadmin(
            &tools,
            root,
            &format!("addprinc -randkey {ZOOKEEPER_PRINCIPAL}"),
        )?;
        kadmin(
            &tools,
            root,
            &format!("addprinc -pw {CLIENT_PASSWORD} {CLIENT_PRINCIPAL}"),
        )?;
        kadmin(
            &tools,
            root,
            &format!(
                "ktadd -k {} {ZOOKEEPER_PRINCIPAL}",
                service_keytab.display()
            ),
        )?;
        kadmin(
            &tools,
            root,
            &format!(
                "ktadd -norandkey -k {} {CLIENT_PRINCIPAL}",
                client_keytab.display()
            ),
        )?;
        let mut attempt = 1;
        let process = loop {
            match start_kdc(&tools, root, port) {
                Ok(process) => break process,
                Err(err) if attempt < START_PORT_ATTEMPTS && is_bind_failure(&err) => {
                    debug!(port, attempt, "KDC port taken; trying another");
                    attempt += 1;
                    port = free_port()?;
                    write_config(root, port)?;
                }
                Err(err) => return Err(err),
            }
        };
        info!(
            port,
            pid = process.java_pid,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "test KDC is serving"
        );
        Ok(Kdc {
            port,
            service: KerberosService::new(
                ZOOKEEPER_PRINCIPAL,
                service_keytab,
                root.join("krb5.conf"),
            ),
            client_keytab,
            process: Mutex::new(Some(process)),
            dir,
        })
    }

    /// Like [`start`](Self::start), on a blocking thread of the current tokio runtime.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    ///
    /// # Cancel safety
    /// The start goes on if the future is dropped; the KDC it starts is then stopped as soon
    /// as the start returns.
    pub async fn start_async() -> Result<Kdc, Error> {
        crate::process::on_blocking_thread("KDC start thread failed", Kdc::start).await
    }

    /// The realm, [`REALM`].
    pub fn realm(&self) -> &str {
        REALM
    }

    /// The KDC's port on `127.0.0.1` (TCP and UDP).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the configuration, the database, keytabs and caches.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The realm's `krb5.conf` (clients: `KRB5_CONFIG`, Java: `-Djava.security.krb5.conf`).
    pub fn krb5_conf(&self) -> &Path {
        self.service.krb5_conf()
    }

    /// The KDC's own profile (`KRB5_KDC_PROFILE`).
    pub fn kdc_conf(&self) -> PathBuf {
        self.dir().join("kdc.conf")
    }

    /// The file receiving the KDC's log.
    pub fn log_path(&self) -> PathBuf {
        self.dir().join("krb5kdc.log")
    }

    /// The ZooKeeper service: [`ZOOKEEPER_PRINCIPAL`], its keytab and the realm's
    /// `krb5.conf`, for [`ZooKeeperServerBuilder::kerberos`](crate::ZooKeeperServerBuilder::kerberos).
    pub fn zookeeper_service(&self) -> KerberosService {
        self.service.clone()
    }

    /// The client principal, [`CLIENT_PRINCIPAL`].
    pub fn client_principal(&self) -> &str {
        CLIENT_PRINCIPAL
    }

    /// The client principal's password.
    pub fn client_password(&self) -> &str {
        CLIENT_PASSWORD
    }

    /// A keytab with the client principal's key (the same key as its password).
    pub fn client_keytab(&self) -> &Path {
        &self.client_keytab
    }

    /// The environment a Kerberos client of this realm needs: `KRB5_CONFIG` naming
    /// [`krb5_conf`](Self::krb5_conf) and `KRB5CCNAME` naming `ccache` (as returned by
    /// [`kinit`](Self::kinit)). Give it to a child process, or set it in a test process
    /// that uses the realm only.
    pub fn env(&self, ccache: &Path) -> Vec<(&'static str, OsString)> {
        vec![
            ("KRB5_CONFIG", self.krb5_conf().as_os_str().to_owned()),
            ("KRB5CCNAME", ccache_name(ccache)),
        ]
    }

    /// Adds `principal` (`name` or `name@ZKTEST.LOCAL`) to the realm, with `password`, or
    /// with a random key when `password` is `None`. Returns the full principal name.
    ///
    /// # Errors
    /// `kadmin.local` failed (the principal exists, say), or the name or the password
    /// contains a space or a quote.
    pub fn add_principal(&self, principal: &str, password: Option<&str>) -> Result<String, Error> {
        let principal = qualified(principal)?;
        let tools = Tools::locate()?;
        match password {
            Some(password) => {
                check_word("password", password)?;
                kadmin(
                    &tools,
                    self.dir(),
                    &format!("addprinc -pw {password} {principal}"),
                )?;
            }
            None => kadmin(
                &tools,
                self.dir(),
                &format!("addprinc -randkey {principal}"),
            )?,
        }
        Ok(principal)
    }

    /// Writes `principal`'s current key to a new keytab `<file_name>` in the KDC directory
    /// (without changing the key) and returns its path.
    ///
    /// # Errors
    /// `kadmin.local` failed, or `file_name` is not a plain file name.
    pub fn export_keytab(&self, principal: &str, file_name: &str) -> Result<PathBuf, Error> {
        let principal = qualified(principal)?;
        check_word("keytab file name", file_name)?;
        if file_name.contains('/') {
            return Err(Error::InvalidConfig(format!(
                "keytab file name {file_name:?} must not contain `/`"
            )));
        }
        let keytab = self.dir().join(file_name);
        let tools = Tools::locate()?;
        kadmin(
            &tools,
            self.dir(),
            &format!("ktadd -norandkey -k {} {principal}", keytab.display()),
        )?;
        Ok(keytab)
    }

    /// Obtains a ticket-granting ticket for `principal` with `password` (`kinit`) into a new
    /// credential cache file in the KDC directory, and returns that file (`KRB5CCNAME` is
    /// `FILE:` followed by it; see [`env`](Self::env)).
    ///
    /// # Errors
    /// `kinit` failed: a wrong password, an unknown principal, an unreachable KDC.
    pub fn kinit(&self, principal: &str, password: &str) -> Result<PathBuf, Error> {
        let ccache = self.new_ccache();
        let tools = Tools::locate()?;
        let mut command = tools.command("kinit", self.dir())?;
        command
            .env("KRB5CCNAME", ccache_name(&ccache))
            .arg(principal)
            .stdin(Stdio::piped());
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| Error::io("cannot run kinit", err))?;
        if let Some(mut stdin) = child.stdin.take() {
            // kinit reads the password from its standard input when that is not a terminal.
            let _ = writeln!(stdin, "{password}");
        }
        let output = child
            .wait_with_output()
            .map_err(|err| Error::io("cannot wait for kinit", err))?;
        check_output("kinit", &output)?;
        Ok(ccache)
    }

    /// Like [`kinit`](Self::kinit), with the key from `keytab` (`kinit -k -t`).
    ///
    /// # Errors
    /// `kinit` failed.
    pub fn kinit_keytab(&self, principal: &str, keytab: &Path) -> Result<PathBuf, Error> {
        let ccache = self.new_ccache();
        let tools = Tools::locate()?;
        let mut command = tools.command("kinit", self.dir())?;
        command
            .env("KRB5CCNAME", ccache_name(&ccache))
            .arg("-k")
            .arg("-t")
            .arg(keytab)
            .arg(principal);
        run(&mut command, "kinit -k")?;
        Ok(ccache)
    }

    /// Lists the tickets in `ccache` (`klist`), as `klist` prints them.
    ///
    /// # Errors
    /// `klist` failed (an empty or missing cache, say).
    pub fn klist(&self, ccache: &Path) -> Result<String, Error> {
        let tools = Tools::locate()?;
        let mut command = tools.command("klist", self.dir())?;
        command.env("KRB5CCNAME", ccache_name(ccache));
        let output = run(&mut command, "klist")?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Whether the KDC process runs.
    pub fn is_running(&self) -> bool {
        match self.lock().as_mut() {
            Some(process) => matches!(process.child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the KDC through its pid and waits until it is gone. Stopping a stopped KDC does
    /// nothing.
    pub fn stop(&self) {
        let process = self.lock().take();
        if let Some(process) = process {
            process.shutdown();
            info!(port = self.port, "test KDC stopped");
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<ServerProcess>> {
        self.process
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn new_ccache(&self) -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        self.dir()
            .join(format!("ccache-{}", NEXT.fetch_add(1, Ordering::Relaxed)))
    }
}

impl Drop for Kdc {
    fn drop(&mut self) {
        self.stop();
    }
}

fn ccache_name(ccache: &Path) -> OsString {
    let mut name = OsString::from("FILE:");
    name.push(ccache);
    name
}

/// `name@REALM` for a bare name; a name with another realm is refused.
fn qualified(principal: &str) -> Result<String, Error> {
    check_word("principal", principal)?;
    match principal.split_once('@') {
        None => Ok(format!("{principal}@{REALM}")),
        Some((_, realm)) if realm == REALM => Ok(principal.to_owned()),
        Some((_, realm)) => Err(Error::InvalidConfig(format!(
            "principal {principal:?} is not in the test realm {REALM} (but {realm})"
        ))),
    }
}

/// Refuses what would break a `kadmin.local -q` line.
fn check_word(what: &str, word: &str) -> Result<(), Error> {
    if word.is_empty()
        || word
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "\"'\\".contains(c))
    {
        return Err(Error::InvalidConfig(format!(
            "{what} {word:?}: must be non-empty, without spaces, quotes or backslashes"
        )));
    }
    Ok(())
}

/// The located tools and the environment they run with.
struct Tools {
    paths: Vec<(&'static str, PathBuf)>,
}

impl Tools {
    fn locate() -> Result<Tools, Error> {
        let mut paths = Vec::new();
        for tool in TOOLS {
            let path = find_tool(tool).ok_or_else(|| Error::ToolNotFound {
                tool: tool.to_owned(),
                packages: KDC_PACKAGES.to_owned(),
            })?;
            paths.push((tool, path));
        }
        Ok(Tools { paths })
    }

    fn path(&self, tool: &str) -> Result<&Path, Error> {
        self.paths
            .iter()
            .find(|(name, _)| *name == tool)
            .map(|(_, path)| path.as_path())
            .ok_or_else(|| Error::ToolNotFound {
                tool: tool.to_owned(),
                packages: KDC_PACKAGES.to_owned(),
            })
    }

    /// `tool` with the realm's private configuration and no terminal.
    fn command(&self, tool: &str, root: &Path) -> Result<Command, Error> {
        let mut command = Command::new(self.path(tool)?);
        command
            .envs(private_env(root))
            .current_dir(root)
            .stdin(Stdio::null());
        Ok(command)
    }
}

/// Points every Kerberos library call at the realm's own files.
fn private_env(root: &Path) -> Vec<(&'static str, OsString)> {
    vec![
        ("KRB5_CONFIG", root.join("krb5.conf").into_os_string()),
        ("KRB5_KDC_PROFILE", root.join("kdc.conf").into_os_string()),
        ("KRB5CCNAME", ccache_name(&root.join("ccache-default"))),
        ("KRB5RCACHEDIR", root.as_os_str().to_owned()),
    ]
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    fs::write(path, contents)
        .map_err(|err| Error::io(format!("cannot write {}", path.display()), err))
}

fn write_config(root: &Path, port: u16) -> Result<(), Error> {
    let dir = root.display();
    write(
        &root.join("krb5.conf"),
        &format!(
            "[libdefaults]\n\
             \tdefault_realm = {REALM}\n\
             \tdns_lookup_realm = false\n\
             \tdns_lookup_kdc = false\n\
             \trdns = false\n\
             \tdns_canonicalize_hostname = false\n\
             \tignore_acceptor_hostname = true\n\
             \tudp_preference_limit = 1\n\
             \tticket_lifetime = 1h\n\
             \tforwardable = true\n\
             \n\
             [realms]\n\
             \t{REALM} = {{\n\
             \t\tkdc = 127.0.0.1:{port}\n\
             \t}}\n\
             \n\
             [domain_realm]\n\
             \tlocalhost = {REALM}\n\
             \t127.0.0.1 = {REALM}\n"
        ),
    )?;
    write(
        &root.join("kdc.conf"),
        &format!(
            "[kdcdefaults]\n\
             \tkdc_listen = 127.0.0.1:{port}\n\
             \tkdc_tcp_listen = 127.0.0.1:{port}\n\
             \n\
             [realms]\n\
             \t{REALM} = {{\n\
             \t\tdatabase_name = {dir}/principal\n\
             \t\tkey_stash_file = {dir}/stash\n\
             \t\tacl_file = {dir}/kadm5.acl\n\
             \t\tkdc_listen = 127.0.0.1:{port}\n\
             \t\tkdc_tcp_listen = 127.0.0.1:{port}\n\
             \t\tmax_life = 1h\n\
             \t\tmax_renewable_life = 1d\n\
             \t\tsupported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n\
             \t}}\n\
             \n\
             [logging]\n\
             \tkdc = STDERR\n\
             \tdefault = STDERR\n"
        ),
    )
}

/// Runs `kadmin.local -q <query>`, which reports some failures only in its output.
fn kadmin(tools: &Tools, root: &Path, query: &str) -> Result<(), Error> {
    let output = run(
        tools
            .command("kadmin.local", root)?
            .args(["-r", REALM, "-q", query]),
        "kadmin.local",
    )?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("while ") || stderr.to_ascii_lowercase().contains("error") {
        return Err(Error::Command {
            command: format!("kadmin.local -q {query:?}"),
            detail: stderr.trim().to_owned(),
        });
    }
    Ok(())
}

fn run(command: &mut Command, name: &str) -> Result<Output, Error> {
    let output = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|err| Error::io(format!("cannot run {name}"), err))?;
    check_output(name, &output)?;
    Ok(output)
}

fn check_output(name: &str, output: &Output) -> Result<(), Error> {
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Command {
        command: name.to_owned(),
        detail: format!(
            "{}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim(),
            String::from_utf8_lossy(&output.stdout).trim()
        ),
    })
}

/// Starts `krb5kdc -n` under the wrapper and waits until its TCP port accepts connections.
fn start_kdc(tools: &Tools, root: &Path, port: u16) -> Result<ServerProcess, Error> {
    let log = root.join("krb5kdc.log");
    let program = tools.path("krb5kdc")?;
    let args = [
        OsString::from("-n"),
        OsString::from("-r"),
        OsString::from(REALM),
    ];
    let mut process = spawn_owned(program, &args, &private_env(root), &log, root, "krb5kdc")?;
    let address = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        match process.child.try_wait() {
            Ok(Some(status)) => return Err(exit_error(status, &log, process.log_offset)),
            Ok(None) => {}
            Err(err) => {
                process.shutdown();
                return Err(Error::io("cannot poll the KDC process", err));
            }
        }
        if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
            return Ok(process);
        }
        if Instant::now() >= deadline {
            process.shutdown();
            return Err(Error::StartTimeout {
                timeout: START_TIMEOUT,
                log: log.clone(),
                log_tail: tail_lines(&log, ERROR_LOG_LINES),
            });
        }
        thread::sleep(POLL_INTERVAL);
    }
}

fn is_bind_failure(err: &Error) -> bool {
    matches!(err, Error::ServerExited { log_tail, .. }
        if log_tail.contains("Address already in use") || log_tail.contains("Cannot bind"))
}
